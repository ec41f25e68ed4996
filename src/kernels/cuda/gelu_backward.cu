// GELU backward on the GPU (gelu.h): dx = dy * GELU'(x), exact erf form (gelu.cuh's
// gelu_erf_grad, the CPU scalar path's formula), or dy times the GELU' the forward saved.
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/cuda_check.h"

#include <algorithm>

namespace minigpt::cuda {
namespace {

__global__ void gelu_backward_kernel(const float* __restrict__ x, const float* dy, float* dx,
                                     int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * gelu_erf_grad(x[i]);
}

__global__ void multiply_kernel(const float* __restrict__ a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = a[i] * b[i];
}

int64_t grid_for(int64_t n) { return std::min<int64_t>((n + 255) / 256, 132 * 16); }

}  // namespace

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(n >= 0, "gelu_backward: negative size ", n);
  if (n == 0) return;
  gelu_backward_kernel<<<static_cast<unsigned>(grid_for(n)), 256, 0, stream>>>(x, dy, dx, n);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void gelu_backward_saved(const float* gelu_grad, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(n >= 0, "gelu_backward_saved: negative size ", n);
  if (n == 0) return;
  multiply_kernel<<<static_cast<unsigned>(grid_for(n)), 256, 0, stream>>>(gelu_grad, dy, dx, n);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
