// Device functions of GELU (exact erf form) for kernels that fuse it (gelu.cu, linear.cu).
// Infinities are explicit, as on the CPU: GELU(-inf) = -0, GELU'(-inf) = 0, GELU'(+inf) = 1.
#pragma once

#include <math_constants.h>

namespace minigpt::cuda {

__device__ __forceinline__ float gelu_erf(float x) {
  if (x == -CUDART_INF_F) return -0.0f;
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}

__device__ __forceinline__ float gelu_erf_grad(float x) {
  if (isinf(x)) return x > 0.0f ? 1.0f : 0.0f;
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
  const float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

}  // namespace minigpt::cuda
