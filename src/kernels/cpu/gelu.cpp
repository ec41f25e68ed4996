// GELU forward and backward on the CPU (gelu.h), exact erf form.
//
// Elementwise, split over the pool in fixed chunks (the result of an element never depends on
// the split). Infinities are handled explicitly because the textbook forms give inf * 0 = NaN:
// GELU(-inf) = -0, GELU(+inf) = +inf, GELU'(-inf) = 0, GELU'(+inf) = 1.
#include "kernels/cpu/gelu.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace minigpt::cpu {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
constexpr int64_t kGrain = 1 << 14;  // elements; smaller arrays stay on the calling thread

inline float gelu_scalar(float x) {
  if (x == -INFINITY) return -0.0f;
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

inline float gelu_grad_scalar(float x) {
  if (std::isinf(x)) return x > 0 ? 1.0f : 0.0f;
  const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, ThreadPool& pool) {
  MINIGPT_CHECK(n >= 0, "gelu: negative size {}", n);
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] = gelu_scalar(x[i]);
      },
      kGrain);
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool) {
  MINIGPT_CHECK(n >= 0, "gelu_backward: negative size {}", n);
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) dx[i] = dy[i] * gelu_grad_scalar(x[i]);
      },
      kGrain);
}

}  // namespace minigpt::cpu
