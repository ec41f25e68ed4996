// softmax_smem: a block per row, the textbook version: each pass strides the row across the
// block and reduces through a shared-memory tree (max, then sum of exp), then a third pass
// writes. Reads the row three times (the later reads mostly hit L2).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"
#include "kernels/cuda/softmax_common.cuh"

#include <climits>

namespace minigpt::cuda {

namespace {

constexpr int kSmemThreads = 256;  // power of two: the tree halves it

__global__ void __launch_bounds__(kSmemThreads)
softmax_smem_kernel(const float* x, float* y, int64_t cols) {
  __shared__ float tree[kSmemThreads];
  const int t = threadIdx.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * cols;

  float m = -INFINITY;
  for (int64_t i = t; i < cols; i += kSmemThreads) m = detail::max_ignoring_nan(m, xr[i]);
  tree[t] = m;
  __syncthreads();
  for (int half = kSmemThreads / 2; half > 0; half /= 2) {
    if (t < half) tree[t] = detail::max_ignoring_nan(tree[t], tree[t + half]);
    __syncthreads();
  }
  m = tree[0];
  __syncthreads();  // everyone has read tree[0] before it is reused for the sum

  float s = 0.f;  // +inf or all -inf: x - m is NaN somewhere, the sum is NaN, the row NaN
  for (int64_t i = t; i < cols; i += kSmemThreads) s += expf(xr[i] - m);
  tree[t] = s;
  __syncthreads();
  for (int half = kSmemThreads / 2; half > 0; half /= 2) {
    if (t < half) tree[t] += tree[t + half];
    __syncthreads();
  }
  const float inv = 1.f / tree[0];
  for (int64_t i = t; i < cols; i += kSmemThreads) yr[i] = expf(xr[i] - m) * inv;
}

}  // namespace

void softmax_smem(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(rows >= 0 && cols >= 1, "softmax_smem: bad shape (", rows, ", ", cols, ")");
  if (rows == 0) return;
  MINIGPT_CUDA_REQUIRE(x != nullptr && y != nullptr, "softmax_smem: null pointer");
  MINIGPT_CUDA_REQUIRE(rows <= INT_MAX, "softmax_smem: ", rows, " rows is too many for a grid");
  softmax_smem_kernel<<<static_cast<unsigned>(rows), kSmemThreads, 0, stream>>>(x, y, cols);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
