// AVX-512 double-precision exp and the normal CDF, for GELU and cross-entropy (not softmax:
// that one has its own float exp in softmax_simd_ops.h).
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
// unnormalised density, shared with GELU's backward). With a = |x| / sqrt 2:
//   a < 1:  erf(a) = a P(a^2), P of degree 7 (3.4e-11);  Phi = (1 +- erf(a)) / 2
//   a >= 1: erfc(a) = exp(-a^2) Q(1/a) / a, Q of degree 13 on 1/a in [0.1, 1] (2.3e-10), a
//           clamped to 10 where erfc is below the smallest float;  Phi = 1 - erfc/2 or erfc/2
// The tail form keeps full relative precision of Phi for very negative x (no 1 + erf
// cancellation). NaN gives NaN; Phi(-inf) = 0, Phi(+inf) = 1 (*gauss = 0 at both).
MINIGPT_AVX512 __m512d normal_cdf_pd(__m512d x, __m512d* gauss) {
  const __m512d a = _mm512_mul_pd(_mm512_abs_pd(x), _mm512_set1_pd(0.70710678118654752440));
  const __m512d z = _mm512_mul_pd(a, a);
  *gauss = exp_pd(_mm512_sub_pd(_mm512_setzero_pd(), z));  // exp(-a^2) = exp(-x^2 / 2)
  __m512d p = _mm512_set1_pd(-9.634991343612668e-06);
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(0.00011254640807179897));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(-0.0008482507747211722));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(0.005220923216649229));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(-0.026865392124772174));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(0.11283781839099895));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(-0.3761263842595722));
  p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(1.1283791670570986));
  const __m512d erf_small = _mm512_mul_pd(a, p);
  // s = 1 / a with a clamped to [0.5, 10] (lanes below 1 are blended away below): rcp14
  // (2^-14) and two Newton steps (2^-56); vdivpd would be the slowest instruction of the loop.
  // NaN stays NaN (min/max return their second operand when one is NaN).
  const __m512d ac = _mm512_max_pd(_mm512_set1_pd(0.5), _mm512_min_pd(_mm512_set1_pd(10.0), a));
  __m512d s = _mm512_rcp14_pd(ac);
  s = _mm512_fmadd_pd(s, _mm512_fnmadd_pd(ac, s, _mm512_set1_pd(1.0)), s);
  s = _mm512_fmadd_pd(s, _mm512_fnmadd_pd(ac, s, _mm512_set1_pd(1.0)), s);
  __m512d q = _mm512_set1_pd(0.10493154976114207);
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(-0.8981267301453786));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(3.502609536727995));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(-8.211260717410113));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(12.816675362213472));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(-13.850099545585966));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(10.28890261825767));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(-4.83124007541919));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(0.947698623650083));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(0.2568417357029483));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(0.020068579768281684));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(-0.2836787945935774));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(7.335435473210944e-05));
  q = _mm512_fmadd_pd(q, s, _mm512_set1_pd(0.5641880788983807));
  const __m512d half_erfc = _mm512_mul_pd(_mm512_mul_pd(*gauss, q), _mm512_mul_pd(s, _mm512_set1_pd(0.5)));
  const __m512d half = _mm512_set1_pd(0.5), one = _mm512_set1_pd(1.0);
  const __m512d half_erf = _mm512_mul_pd(half, erf_small);
  const __mmask8 small = _mm512_cmp_pd_mask(a, one, _CMP_LT_OQ);
  const __mmask8 neg = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_LT_OQ);
  // Phi for x >= 0 (and NaN: the tail lanes below carry the NaN through s and q)
  const __m512d pos = _mm512_mask_blend_pd(small, _mm512_sub_pd(one, half_erfc), _mm512_add_pd(half, half_erf));
  const __m512d negv = _mm512_mask_blend_pd(small, half_erfc, _mm512_sub_pd(half, half_erf));
  return _mm512_mask_blend_pd(neg, pos, negv);
}

#undef MINIGPT_AVX512

}  // namespace minigpt::cpu::avx512
