// LayerNorm backward on the GPU (layernorm.h): a warp per row for dx, then a column pass for
// dweight and dbias. Formulas as kernels/cpu/layernorm.cpp: statistics in double from x,
// rounded to float; g = dy * weight; dx = rstd (g - mean(g) - xhat mean(g xhat)).
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

using detail::warp_sum;

constexpr int kRowsPerBlock = 8;  // warps per block

__global__ void layernorm_backward_dx(const float* __restrict__ dy, const float* __restrict__ x,
                                      const float* __restrict__ w, float* dx, bool accumulate,
                                      float* __restrict__ mean, float* __restrict__ rstd, int N,
                                      int C, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y;
  const int lane = threadIdx.x;
  if (row >= N) return;
  const float* xr = x + static_cast<int64_t>(row) * C;
  const float* dyr = dy + static_cast<int64_t>(row) * C;
  float* dxr = dx + static_cast<int64_t>(row) * C;
  double s = 0.0;
  for (int c = lane; c < C; c += 32) s += xr[c];
  const double m = warp_sum(s) / C;
  double ss = 0.0;
  for (int c = lane; c < C; c += 32) {
    const double d = xr[c] - m;
    ss += d * d;
  }
  const double var = warp_sum(ss) / C;  // biased, as nn.LayerNorm
  const float mf = static_cast<float>(m);
  const float rf = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  double sg = 0.0, sgx = 0.0;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (xr[c] - mf) * rf;
    const float g = dyr[c] * w[c];
    sg += g;
    sgx += static_cast<double>(g) * xhat;
  }
  const float mg = static_cast<float>(warp_sum(sg) / C);
  const float mgx = static_cast<float>(warp_sum(sgx) / C);
  for (int c = lane; c < C; c += 32) {
    const float xhat = (xr[c] - mf) * rf;
    const float v = rf * (dyr[c] * w[c] - mg - xhat * mgx);
    dxr[c] = accumulate ? dxr[c] + v : v;
  }
  if (lane == 0) {
    mean[row] = mf;
    rstd[row] = rf;
  }
}

// dweight[c] = sum_n dy xhat, dbias[c] = sum_n dy; blockDim (32, kColRows).
__global__ void layernorm_backward_params(const float* __restrict__ dy,
                                          const float* __restrict__ x,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, float* dweight,
                                          float* dbias, int N, int C) {
  __shared__ double smem[detail::kColRows * 32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double dw = 0.0, db = 0.0;
  if (c < C) {
    for (int r = threadIdx.y; r < N; r += detail::kColRows) {
      const int64_t i = static_cast<int64_t>(r) * C + c;
      const float xhat = (x[i] - mean[r]) * rstd[r];
      dw += static_cast<double>(dy[i]) * xhat;
      db += dy[i];
    }
  }
  dw = detail::column_total(dw, smem);
  db = detail::column_total(db, smem);
  if (threadIdx.y == 0 && c < C) {
    if (dweight) dweight[c] = static_cast<float>(dw);
    if (dbias) dbias[c] = static_cast<float>(db);
  }
}

}  // namespace

void layernorm_backward(const float* dy, const float* x, const float* weight, float* dx,
                        bool accumulate, float* mean, float* rstd, float* dweight, float* dbias,
                        int64_t N, int64_t C, float eps, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && C >= 1 && N < (int64_t{1} << 31) && C < (1 << 24),
                       "layernorm_backward: bad sizes N=", N, " C=", C);
  if (N == 0) return;
  const dim3 block(32, kRowsPerBlock);
  layernorm_backward_dx<<<static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock), block, 0,
                          stream>>>(dy, x, weight, dx, accumulate, mean, rstd, static_cast<int>(N),
                                    static_cast<int>(C), eps);
  MINIGPT_CUDA_CHECK_LAUNCH();
  if (!dweight && !dbias) return;
  layernorm_backward_params<<<static_cast<unsigned>((C + 31) / 32), dim3(32, detail::kColRows), 0,
                              stream>>>(dy, x, mean, rstd, dweight, dbias, static_cast<int>(N),
                                        static_cast<int>(C));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
