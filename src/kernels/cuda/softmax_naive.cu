// softmax_naive: a thread per row, three passes over global memory (max; sum of exp; write).
// The baseline of the family: adjacent threads read addresses `cols` floats apart, so loads
// are uncoalesced; it exists to be measured against, not to be used.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"
#include "kernels/cuda/softmax_common.cuh"

#include <climits>

namespace minigpt::cuda {

namespace {

__global__ void softmax_naive_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  float m = -INFINITY;  // NaN-ignoring max; a NaN makes the sum NaN below
  for (int64_t i = 0; i < cols; ++i) m = detail::max_ignoring_nan(m, xr[i]);
  // +inf: inf - inf = NaN; all -inf: -inf - -inf = NaN: both give a NaN row, as the CPU.
  float s = 0.f;
  for (int64_t i = 0; i < cols; ++i) s += expf(xr[i] - m);
  const float inv = 1.f / s;
  for (int64_t i = 0; i < cols; ++i) yr[i] = expf(xr[i] - m) * inv;
}

}  // namespace

void softmax_naive(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(rows >= 0 && cols >= 1, "softmax_naive: bad shape (", rows, ", ", cols, ")");
  if (rows == 0) return;
  MINIGPT_CUDA_REQUIRE(x != nullptr && y != nullptr, "softmax_naive: null pointer");
  constexpr int kThreads = 128;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  MINIGPT_CUDA_REQUIRE(blocks <= INT_MAX, "softmax_naive: ", rows, " rows is too many");
  softmax_naive_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, rows, cols);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
