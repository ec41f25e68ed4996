// GELU forward and backward on the CPU (gelu.h), exact erf form.
//
// Elementwise, split over the pool in fixed chunks (the result of an element never depends on
// the split). Infinities are handled explicitly because the textbook forms give inf * 0 = NaN:
// GELU(-inf) = -0, GELU(+inf) = +inf, GELU'(-inf) = 0, GELU'(+inf) = 1.
//
// With AVX-512 (the production path): GELU(x) = x Phi(x) and GELU'(x) = Phi(x) + x phi(x) in
// double, 8 at a time, through vec_math_avx512.h, rounded to float once (within ~1/2 ulp). The
// fallback without AVX-512 is the float formula 0.5 x (1 + erff(x / sqrt 2)), several times
// slower.
#include "kernels/cpu/gelu.h"

#include "core/error.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <algorithm>
#include <cmath>

namespace minigpt::cpu {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
constexpr int64_t kGrain = 1 << 14;  // elements; smaller arrays stay on the calling thread (a wake-up costs more)

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

// 8 floats -> 8 results. backward = false: y = GELU(x); true: y = dy * GELU'(x).
template <bool backward>
__attribute__((target("avx512f"), always_inline)) inline void gelu8_avx512(const float* x,
                                                                          const float* dy,
                                                                          float* y) {
  const __m512d xd = _mm512_cvtps_pd(_mm256_loadu_ps(x));
  __m512d gauss;
  const __m512d cdf = avx512::normal_cdf_pd(xd, &gauss);
  const __mmask8 inf = _mm512_cmp_pd_mask(_mm512_abs_pd(xd), _mm512_set1_pd(INFINITY), _CMP_EQ_OQ);
  __m512d r;
  if constexpr (!backward) {
    r = _mm512_mul_pd(xd, cdf);  // x Phi(x); -inf * 0 is NaN: GELU(-inf) = -0 (+inf * 1 is fine)
    r = _mm512_mask_blend_pd(inf & _mm512_cmp_pd_mask(xd, _mm512_setzero_pd(), _CMP_LT_OQ), r,
                             _mm512_set1_pd(-0.0));
  } else {
    r = _mm512_fmadd_pd(_mm512_mul_pd(xd, gauss), _mm512_set1_pd(0.39894228040143267794), cdf);
    r = _mm512_mask_blend_pd(inf, r, cdf);  // +-inf * 0 is NaN: GELU'(+-inf) = Phi = 1 or 0
    r = _mm512_mul_pd(r, _mm512_cvtps_pd(_mm256_loadu_ps(dy)));
  }
  _mm256_storeu_ps(y, _mm512_cvtpd_ps(r));
}

// [i0, i1) in groups of 16 (two independent groups of 8 in flight); the last partial group
// goes through a zero-padded copy.
template <bool backward>
__attribute__((target("avx512f"))) void gelu_range_avx512(const float* x, const float* dy,
                                                          float* y, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    gelu8_avx512<backward>(x + i, dy + (backward ? i : 0), y + i);
    gelu8_avx512<backward>(x + i + 8, dy + (backward ? i + 8 : 0), y + i + 8);
  }
  for (; i < i1; i += 8) {
    const int64_t n = std::min<int64_t>(8, i1 - i);
    float xb[8] = {}, db[8] = {}, yb[8];
    std::copy(x + i, x + i + n, xb);
    if (backward) std::copy(dy + i, dy + i + n, db);
    gelu8_avx512<backward>(xb, db, yb);
    std::copy(yb, yb + n, y + i);
  }
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, ThreadPool& pool) {
  MINIGPT_CHECK(n >= 0, "gelu: negative size {}", n);
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        if (gemm_avx512_available()) return gelu_range_avx512<false>(x, nullptr, y, i0, i1);
        for (int64_t i = i0; i < i1; ++i) y[i] = gelu_scalar(x[i]);
      },
      kGrain);
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool) {
  MINIGPT_CHECK(n >= 0, "gelu_backward: negative size {}", n);
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        if (gemm_avx512_available()) return gelu_range_avx512<true>(x, dy, dx, i0, i1);
        for (int64_t i = i0; i < i1; ++i) dx[i] = dy[i] * gelu_grad_scalar(x[i]);
      },
      kGrain);
}

}  // namespace minigpt::cpu
