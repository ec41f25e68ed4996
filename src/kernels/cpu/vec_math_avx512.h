// AVX-512 double-precision exp and the normal CDF, for GELU and cross-entropy (not softmax:
// that one has its own float exp in softmax_simd_ops.h); and gelu_ps, a float GELU for the
// inference forward only (training keeps the double path: its numerics are frozen).
//
// Floats are widened to double, evaluated with ~1e-10 relative error, and rounded back to
// float once, so the float results are within about half an ulp of the true values: as exact
// as expf/erff, only 8 lanes at a time. Every function has target("avx512f"); callers check
// gemm_avx512_available() (the same CPU test) before calling.
//
// Coefficients: least-squares fits in relative error on Chebyshev nodes (numpy, double), with
// the max relative error over the interval stated next to each polynomial.
#pragma once

#include <immintrin.h>

namespace minigpt::cpu::avx512 {

#define MINIGPT_AVX512 __attribute__((target("avx512f"), always_inline)) inline

// exp(x) for every double x: NaN stays NaN, x < -745 gives 0, x > 709.7 gives +inf.
// x = n ln2 + r, |r| <= ln2/2; exp(r) by its Taylor series to r^11 (error < 3e-13), times 2^n
// through scalef (exact, handles underflow to subnormals and 0).
MINIGPT_AVX512 __m512d exp_pd(__m512d x) {
  x = _mm512_min_pd(_mm512_set1_pd(710.0), _mm512_max_pd(_mm512_set1_pd(-746.0), x));  // NaN kept
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), x);  // ln2 hi
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);          // ln2 lo
  __m512d p = _mm512_set1_pd(1.0 / 39916800.0);
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 3628800.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 362880.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 40320.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 5040.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 720.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 120.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 24.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 6.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(0.5));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
  return _mm512_scalef_pd(p, n);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, and exp(-x^2 / 2) in *gauss (the
// unnormalised density, shared with GELU's backward). One formula for every x, no branches:
// with a = |x| / sqrt 2 and t = 1 / (1 + a / 2),
//   erfc(a) = exp(-a^2) R(t),  R of degree 12 (max relative error 8.5e-11 for a in [0, 10]; a
//   is clamped to 10 inside R, where erfc is already below the smallest float),
//   Phi = 1 - erfc(a) / 2 for x >= 0, erfc(a) / 2 for x < 0.
// The x < 0 side keeps full relative precision (no 1 + erf cancellation); on the x >= 0 side
// Phi >= 1/2, so the absolute error of erfc is what counts. NaN gives NaN; Phi(-inf) = 0,
// Phi(+inf) = 1 (*gauss = 0 at both).
MINIGPT_AVX512 __m512d normal_cdf_pd(__m512d x, __m512d* gauss) {
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d a = _mm512_mul_pd(_mm512_abs_pd(x), _mm512_set1_pd(0.70710678118654752440));
  *gauss = exp_pd(_mm512_sub_pd(_mm512_setzero_pd(), _mm512_mul_pd(a, a)));  // exp(-x^2 / 2)
  // t = 1 / (1 + min(a, 10) / 2): rcp14 (2^-14) and two Newton steps (2^-56); vdivpd would be
  // the slowest instruction here. NaN stays NaN (min returns its second operand on NaN).
  const __m512d den = _mm512_fmadd_pd(_mm512_min_pd(_mm512_set1_pd(10.0), a), _mm512_set1_pd(0.5), one);
  __m512d t = _mm512_rcp14_pd(den);
  t = _mm512_fmadd_pd(t, _mm512_fnmadd_pd(den, t, one), t);
  t = _mm512_fmadd_pd(t, _mm512_fnmadd_pd(den, t, one), t);
  __m512d r = _mm512_set1_pd(-0.03491545558369883);
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.25802152253725014));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(-0.8184835373560452));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(1.4170038216148875));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(-1.3985859323194965));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.7865926962551179));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(-0.37424634621171526));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.19941454911020423));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.1505818112756965));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.25080889171517573));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.28168935591681404));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(0.28211928594982594));
  r = _mm512_fmadd_pd(r, t, _mm512_set1_pd(-6.629891876397099e-07));
  const __m512d half_erfc = _mm512_mul_pd(_mm512_mul_pd(*gauss, r), _mm512_set1_pd(0.5));
  const __mmask8 neg = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_LT_OQ);
  return _mm512_mask_blend_pd(neg, _mm512_sub_pd(one, half_erfc), half_erfc);
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

// GELU(x) = x Phi(x) in float, 16 lanes: normal_cdf_pd's formula (same R(t) coefficients,
// rounded to float) evaluated in float. Phi's absolute error is ~1e-7 (R's float Horner sum
// cancels: its terms reach 1.4 for values near 0.5), so GELU is within ~5e-7 absolute of the
// double path, at most 9 ulp where |GELU| > 0.01 (tests/layers_test.cpp measures it), in
// ~4x fewer cycles. For inference only. GELU(-inf) = -0, GELU(+inf) = +inf, NaN stays NaN.
MINIGPT_AVX512 __m512 gelu_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752440f));
  const __m512 gauss = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
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
  const __m512 half_erfc = _mm512_mul_ps(_mm512_mul_ps(gauss, r), _mm512_set1_ps(0.5f));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, half_erfc), half_erfc);
  const __m512 y = _mm512_mul_ps(x, phi);
  // -inf * 0 is NaN: GELU(-inf) = -0
  const __mmask16 minf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  return _mm512_mask_blend_ps(minf, y, _mm512_set1_ps(-0.0f));
}

#undef MINIGPT_AVX512

}  // namespace minigpt::cpu::avx512
