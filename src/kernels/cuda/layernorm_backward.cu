// LayerNorm backward on the GPU (layernorm.h), one launch: a warp per row for dx, formulas as
// kernels/cpu/layernorm.cpp (statistics in double from x, rounded to float; g = dy * weight;
// dx = rstd (g - mean(g) - xhat mean(g xhat))). Each warp also leaves its row's dy * xhat and
// dy in shared memory; the block adds its 8 rows per column (in row order) into a partial in
// global memory, and the last block to finish (a counter, after __threadfence) adds the
// partials in block order into dweight and dbias, in double. Fixed orders throughout: the same
// bits on every run. The last block resets the counter, so graph replays need no memset.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

using detail::warp_sum;

constexpr int kRowsPerBlock = 8;  // warps per block

int64_t blocks_for(int64_t N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

// Dynamic shared memory: (dy xhat, dy) per row of the block and column, doubles.
int64_t smem_bytes(int64_t C) { return 2 * kRowsPerBlock * C * static_cast<int64_t>(sizeof(double)); }

// Thread `first` of `stride` adds element p = first, first + stride, ... of every block's
// partial in block order (p < C: dweight, else dbias), 32 loads in flight: the blocks' partials
// come from L2.
__device__ __forceinline__ void sum_partials(const double* partial, float* dweight, float* dbias, int blocks,
                                             int C, int first, int stride) {
  for (int p = first; p < 2 * C; p += stride) {
    const double t = detail::ordered_sum_l2<double, 32>(partial + p, 2 * static_cast<int64_t>(C), blocks);
    if (p < C && dweight) dweight[p] = static_cast<float>(t);
    if (p >= C && dbias) dbias[p - C] = static_cast<float>(t);
  }
}

__global__ void layernorm_backward_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                          const float* __restrict__ w, float* dx, const float* add,
                                          float* dweight, float* dbias, double* partial, int* counter,
                                          int N, int C, float eps) {
  extern __shared__ double sm[];  // [2][kRowsPerBlock][C]
  __shared__ bool last;
  const int warp = threadIdx.y, lane = threadIdx.x;
  const int row = blockIdx.x * kRowsPerBlock + warp;
  const bool params = partial != nullptr;
  double* pw = sm + warp * C;
  double* pb = sm + (kRowsPerBlock + warp) * C;
  if (row < N) {
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
      dxr[c] = add ? add[static_cast<int64_t>(row) * C + c] + v : v;  // add may be dx itself
      if (params) {
        pw[c] = static_cast<double>(dyr[c]) * xhat;
        pb[c] = dyr[c];
      }
    }
  } else if (params) {
    for (int c = lane; c < C; c += 32) pw[c] = pb[c] = 0.0;
  }
  if (!params) return;  // the same for every thread of the grid
  __syncthreads();
  const int tid = warp * 32 + lane, nthreads = 32 * kRowsPerBlock;
  double* bp = partial + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int c = tid; c < C; c += nthreads) {
    double sw = 0.0, sb = 0.0;
    for (int r = 0; r < kRowsPerBlock; ++r) {
      sw += sm[r * C + c];
      sb += sm[(kRowsPerBlock + r) * C + c];
    }
    bp[c] = sw;
    bp[C + c] = sb;
  }
  if (counter == nullptr) return;  // layernorm_backward_data: the partials are the result
  __threadfence();  // publish the partial before counting this block in
  __syncthreads();
  if (tid == 0) last = atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_partials(partial, dweight, dbias, static_cast<int>(gridDim.x), C, tid, nthreads);
  if (tid == 0) *counter = 0;  // ready for the next call (or graph replay)
}

// layernorm_backward_params: the last block's sum above as its own launch (one thread per
// element of the partials' rows), the same order, so the same bits.
__global__ void layernorm_params_kernel(const double* __restrict__ partial, float* dweight, float* dbias,
                                        int blocks, int C) {
  sum_partials(partial, dweight, dbias, blocks, C, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x),
               static_cast<int>(gridDim.x * blockDim.x));
}

}  // namespace

int64_t layernorm_backward_scratch(int64_t N, int64_t C) { return 2 * blocks_for(N) * C; }

namespace {
void check_backward_sizes(int64_t N, int64_t C) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && C >= 1 && N < (int64_t{1} << 31) && C < (1 << 24),
                       "layernorm_backward: bad sizes N=", N, " C=", C);
}

// One launch of the row kernel; counter null: the partials are left for layernorm_backward_params.
void launch_rows(const float* dy, const float* x, const float* weight, float* dx, const float* add,
                 float* dweight, float* dbias, double* partial, int* counter, int64_t N, int64_t C, float eps,
                 cudaStream_t stream) {
  const int64_t bytes = partial ? smem_bytes(C) : 0;
  // C > 384 takes more than the default 48 KiB
  detail::allow_shared_memory(layernorm_backward_kernel, bytes, cat("layernorm_backward: C=", C).c_str());
  layernorm_backward_kernel<<<static_cast<unsigned>(blocks_for(N)), dim3(32, kRowsPerBlock),
                              static_cast<size_t>(bytes), stream>>>(
      dy, x, weight, dx, add, dweight, dbias, partial, counter, static_cast<int>(N), static_cast<int>(C), eps);
  MINIGPT_CUDA_CHECK_LAUNCH();
}
}  // namespace

void layernorm_backward(const float* dy, const float* x, const float* weight, float* dx,
                        bool accumulate, float* dweight, float* dbias,
                        const LayerNormGradScratch& scratch, int64_t N, int64_t C, float eps,
                        cudaStream_t stream) {
  check_backward_sizes(N, C);
  if (N == 0) return;
  const bool params = dweight != nullptr || dbias != nullptr;
  MINIGPT_CUDA_REQUIRE(!params || (scratch.partial && scratch.counter &&
                                   scratch.partial_doubles >= layernorm_backward_scratch(N, C)),
                       "layernorm_backward: the scratch is missing or too small for N=", N, " C=", C);
  launch_rows(dy, x, weight, dx, accumulate ? dx : nullptr, dweight, dbias, params ? scratch.partial : nullptr,
              scratch.counter, N, C, eps, stream);
}

void layernorm_backward_data(const float* dy, const float* x, const float* weight, float* dx, const float* add,
                             double* partial, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  check_backward_sizes(N, C);
  if (N == 0) return;
  launch_rows(dy, x, weight, dx, add, nullptr, nullptr, partial, nullptr, N, C, eps, stream);
}

void layernorm_backward_params(const double* partial, float* dweight, float* dbias, int64_t N, int64_t C,
                               cudaStream_t stream) {
  check_backward_sizes(N, C);
  MINIGPT_CUDA_REQUIRE(partial != nullptr, "layernorm_backward_params: no partials");
  if (N == 0) return;
  constexpr int kThreads = 64;
  layernorm_params_kernel<<<static_cast<unsigned>((2 * C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      partial, dweight, dbias, static_cast<int>(blocks_for(N)), static_cast<int>(C));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
