// GELU forward on the GPU (gelu.h): a grid-stride elementwise kernel.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gelu.h"

#include <algorithm>

namespace minigpt::cuda {
namespace {

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = gelu_erf(x[i]);
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(n >= 0, "gelu_forward: negative size ", n);
  if (n == 0) return;
  MINIGPT_CUDA_REQUIRE(x && y, "gelu_forward: null pointer");
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  gelu_forward_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
