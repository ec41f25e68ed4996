// AVX-512 float math for the model's layers: exp (cross-entropy, attention), the normal CDF,
// GELU and GELU' (forward and backward). Not softmax: that one has its own exp in
// softmax_simd_ops.h. exp_ps is about 1 ulp, the normal CDF ~1e-7 absolute (see each); an
// earlier double-precision version (~1/2 ulp) cost ~4x the cycles. Every function has
// target("avx512f"); callers run them only when active_isa() is Isa::Avx512 (core/isa.h).
//
// Coefficients: least-squares fits in relative error on Chebyshev nodes (numpy, double), with
// the max relative error over the interval stated next to each polynomial.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace minigpt::cpu::avx512 {

#define MINIGPT_AVX512 __attribute__((target("avx512f"), always_inline)) inline

// The first min(n, 16) lanes (none when n <= 0): the mask of a loop's last, partial vector.
inline __mmask16 lanes(int64_t n) {
  if (n <= 0) return 0;
  if (n >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << n) - 1u);
}

// Lanes 0-7 and 8-15 of v widened to double (sums of floats kept in double).
MINIGPT_AVX512 __m512d widen_lo(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
MINIGPT_AVX512 __m512d widen_hi(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// exp(x) in float, 16 lanes, for x in [-104, 89] (clamped: below gives 0 or the smallest
// subnormal, above +inf). x = n ln2 + r, |r| <= ln2/2, exp(r) by Taylor to r^7 (relative
// error < 6e-9 before rounding), times 2^n through scalef. About 1 ulp.
MINIGPT_AVX512 __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 hi (exact n*hi)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);     // ln2 lo
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2 in float, 16 lanes, and exp(-x^2 / 2)
// in *gauss (the unnormalised density, shared with GELU's backward). One formula for every x,
// no branches: with a = |x| / sqrt 2 and t = 1 / (1 + a / 2),
//   erfc(a) = exp(-a^2) R(t),  R of degree 12 (fitted in double: max relative error 8.5e-11
//   for a in [0, 10]; a is clamped to 10 inside R, where erfc is already below the smallest
//   float), Phi = 1 - erfc(a) / 2 for x >= 0, erfc(a) / 2 for x < 0.
// The x < 0 side keeps relative precision (no 1 + erf cancellation). In float, R's Horner sum
// cancels (its terms reach 1.4 for values near 0.5), so Phi's absolute error is ~1e-7.
// NaN gives NaN; Phi(-inf) = 0, Phi(+inf) = 1 (*gauss = 0 at both).
MINIGPT_AVX512 __m512 normal_cdf_ps(__m512 x, __m512* gauss) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752440f));
  *gauss = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
  // t = 1 / (1 + min(a, 10) / 2): rcp14 and one Newton step (2^-28)
  const __m512 den = _mm512_fmadd_ps(_mm512_min_ps(_mm512_set1_ps(10.0f), a), _mm512_set1_ps(0.5f), one);
  __m512 t = _mm512_rcp14_ps(den);
  t = _mm512_fmadd_ps(t, _mm512_fnmadd_ps(den, t, one), t);
  __m512 r = _mm512_set1_ps(-0.03491545558369883f);
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.25802152253725014f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-0.8184835373560452f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(1.4170038216148875f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-1.3985859323194965f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.7865926962551179f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-0.37424634621171526f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.19941454911020423f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.1505818112756965f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.25080889171517573f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.28168935591681404f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.28211928594982594f));
  r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-6.629891876397099e-07f));
  const __m512 half_erfc = _mm512_mul_ps(_mm512_mul_ps(*gauss, r), _mm512_set1_ps(0.5f));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, half_erfc), half_erfc);
}

// GELU(x) = x Phi(x) in float, 16 lanes: within ~5e-7 absolute of the double formula, at most
// ~9 ulp where |GELU| > 0.01 (tests/layers_test.cpp measures it). GELU(-inf) = -0,
// GELU(+inf) = +inf, NaN stays NaN.
MINIGPT_AVX512 __m512 gelu_ps(__m512 x) {
  __m512 gauss;
  const __m512 y = _mm512_mul_ps(x, normal_cdf_ps(x, &gauss));
  // -inf * 0 is NaN: GELU(-inf) = -0
  const __mmask16 minf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(minf, y, _mm512_set1_ps(-0.0f));
}

// GELU'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi), in float: within ~3e-7
// absolute (Phi's error, and the cancellation near the root x ~ -0.75). GELU'(-inf) = 0,
// GELU'(+inf) = 1 (inf * 0 would be NaN), NaN stays NaN. gelu_with_grad_ps gives both from
// one normal CDF, bitwise equal to gelu_ps and gelu_grad_ps.
MINIGPT_AVX512 __m512 gelu_grad_from_cdf_ps(__m512 x, __m512 cdf, __m512 gauss) {
  const __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(x, gauss), _mm512_set1_ps(0.39894228040143267794f), cdf);
  const __mmask16 inf = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(inf, g, cdf);
}
MINIGPT_AVX512 __m512 gelu_grad_ps(__m512 x) {
  __m512 gauss;
  const __m512 cdf = normal_cdf_ps(x, &gauss);
  return gelu_grad_from_cdf_ps(x, cdf, gauss);
}
MINIGPT_AVX512 __m512 gelu_with_grad_ps(__m512 x, __m512* grad) {
  __m512 gauss;
  const __m512 cdf = normal_cdf_ps(x, &gauss);
  *grad = gelu_grad_from_cdf_ps(x, cdf, gauss);
  const __mmask16 minf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(minf, _mm512_mul_ps(x, cdf), _mm512_set1_ps(-0.0f));
}

#undef MINIGPT_AVX512

}  // namespace minigpt::cpu::avx512
