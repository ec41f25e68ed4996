// LayerNorm forward on the GPU (layernorm.h): one warp per row, 8 rows per block.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/layernorm.h"

namespace minigpt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void layernorm_forward_kernel(const float* x, const float* weight, const float* bias,
                                         float* y, float* mean_out, float* rstd_out, int64_t N,
                                         int64_t C, float eps) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (row >= N) return;  // whole warps leave together
  const float* xr = x + row * C;
  float m, r;
  warp_row_stats(xr, C, eps, m, r);
  // every lane has read its elements (in warp_row_stats) before any lane writes: y may alias x
  __syncwarp();
  float* yr = y + row * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) yr[c] = (xr[c] - m) * r * weight[c] + bias[c];
  if ((threadIdx.x & 31) == 0) {
    if (mean_out) mean_out[row] = m;
    if (rstd_out) rstd_out[row] = r;
  }
}

}  // namespace

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t C, float eps,
                       cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && C >= 1, "layernorm_forward: bad shape N=", N, " C=", C);
  MINIGPT_CUDA_REQUIRE(eps >= 0.0f, "layernorm_forward: negative eps ", eps);
  if (N == 0) return;
  MINIGPT_CUDA_REQUIRE(x && weight && bias && y, "layernorm_forward: null pointer");
  const int64_t blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  layernorm_forward_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
      x, weight, bias, y, mean, rstd, N, C, eps);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
