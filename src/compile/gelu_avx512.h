// GELU(x) = x Phi(x) in float, 16 AVX-512 lanes, for the generated GEMM's fused epilogue (the
// C++ back end pastes this file's text into every AVX-512 GEMM source; tests include it). It is
// not eager's GELU (src/kernels/cpu/vec_math_avx512.h, the reference, left as it is): the same
// function to about the same accuracy at half the instructions (~20 against ~41).
//
// How: GELU(x) = x + GELU(-x) for x > 0, so only g(a) = GELU(-a) = -a Phi(-a), a = |x|, is
// approximated: Phi(-a) on [0, 6] in 16 intervals of width 3/8, on each a degree-5 polynomial in
// t = a * 16/6 - (i + 1/2), t in [-1/2, 1/2] (least squares in relative error on Chebyshev nodes,
// numpy, double, rounded to float). The interval's six coefficients come from 16-entry tables by
// one vpermps each (the index i in the low 4 bits), so there is no exp, no division and no branch.
// Phi(-a) > 0 is approximated directly (no 1 - erf cancellation for x < 0). For a >= 5.99,
// Phi(-a) < 1.1e-9 and g = -0 (|GELU(-a)| < 6.3e-9 there).
// Accuracy against 0.5 x erfc(-x / sqrt 2) in double over [-12, 12] in steps of 2^-12
// (tests/compile_gemm_test.cpp): at most 6 ulp where |GELU| > 0.01, at most 2.4e-7 absolute;
// eager's gelu_ps: 7.9 ulp, 3.8e-7. GELU(-inf) = -0, GELU(+inf) = +inf, NaN stays NaN.
// Speed (8192 values in L1, one core, this project's 2-core AVX-512 guest): 4.2 us against
// gelu_ps's 9.7-10.2 us; the interval index by the 1.5 * 2^23 shift (below) instead of a
// truncating conversion, a min and a conversion back: ~7% less again (5.3 -> 4.9-5.0 us).
#pragma once

#include <immintrin.h>
#include <stdint.h>

// mg_gelu_tab[k][i]: the coefficient of t^k on interval i
alignas(64) static const float mg_gelu_tab[6][16] = {
    {  // t^0
        0.425634325f, 0.286887705f, 0.174250722f, 0.0946757421f,
        0.0457536243f, 0.0195800774f, 0.00739460625f, 0.00245790114f,
        0.000717542483f, 0.000183670127f, 4.11675574e-05f, 8.07097967e-06f,
        1.38282394e-06f, 2.06899529e-07f, 2.70171636e-08f, 3.07741255e-09f,
    },
    {  // t^1
        -0.146996588f, -0.127712831f, -0.0964027047f, -0.0632224455f,
        -0.0360230692f, -0.0178327169f, -0.00766975665f, -0.00286597735f,
        -0.000930444978f, -0.000262442976f, -6.43139065e-05f, -1.36930275e-05f,
        -2.53289727e-06f, -4.07059218e-07f, -5.68352299e-08f, -6.89438284e-09f,
    },
    {  // t^2
        0.00516770408f, 0.0134694083f, 0.0169455651f, 0.0155586256f,
        0.011398036f, 0.00689636311f, 0.003505375f, 0.00151135959f,
        0.000556071114f, 0.000175289912f, 4.7474372e-05f, 1.10692126e-05f,
        2.22529729e-06f, 3.86170569e-07f, 5.79011896e-08f, 7.50638485e-09f,
    },
    {  // t^3
        0.00332399574f, 0.00204601954f, 0.000273504265f, -0.00107078685f,
        -0.0015598404f, -0.00135986751f, -0.000888211944f, -0.000464167708f,
        -0.000199785529f, -7.19387099e-05f, -2.18768546e-05f, -5.65375922e-06f,
        -1.24711642e-06f, -2.35542245e-07f, -3.81820762e-08f, -5.32209876e-09f,
    },
    {  // t^4
        -0.000178003786f, -0.00042031359f, -0.000418796233f, -0.000232655395f,
        -2.158604e-05f, 0.000100018624f, 0.00012018183f, 8.69161522e-05f,
        4.68429789e-05f, 2.00795494e-05f, 7.05108778e-06f, 2.06162667e-06f,
        5.06966899e-07f, 1.05555372e-07f, 1.86969604e-08f, 2.8272662e-09f,
    },
    {  // t^5
        -6.69386645e-05f, -2.47337975e-05f, 2.39749515e-05f, 4.52129279e-05f,
        3.50248993e-05f, 1.26847717e-05f, -3.45285957e-06f, -8.50026663e-06f,
        -6.84623183e-06f, -3.73033322e-06f, -1.55527425e-06f, -5.19934474e-07f,
        -1.42699818e-07f, -3.2603392e-08f, -6.25715568e-09f, -1.01502218e-09f,
    },
};

__attribute__((target("avx512f"), always_inline)) static inline __m512 mg_gelu_table_ps(__m512 x) {
  // -|x| (the integer or: _mm512_or_ps needs AVX512DQ)
  const __m512 na = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  const __m512 nk = _mm512_set1_ps(-16.0f / 6.0f);
  // y = a * 16/6 - 1/2; y + 1.5 * 2^23 rounds y to the integer n (ties to even), held in the
  // low mantissa bits of s: interval n = round(a * 16/6 - 1/2) (the floor of a * 16/6, or at an
  // interval's edge its neighbour, whose polynomial holds there too, at t = -1/2 instead of
  // +1/2). Lanes with n >= 16 (a >= 5.99, NaN) wrap in the 4-bit index; they are replaced by
  // -0 below.
  const __m512 y = _mm512_fmadd_ps(na, nk, _mm512_set1_ps(-0.5f));
  const __m512 s = _mm512_add_ps(y, _mm512_set1_ps(12582912.0f));
  const __m512i i = _mm512_castps_si512(s);
  // t = a * 16/6 - (n + 1/2) in one rounding (n + 1/2 exact)
  const __m512 t = _mm512_fmsub_ps(na, nk, _mm512_add_ps(_mm512_sub_ps(s, _mm512_set1_ps(12582912.0f)), _mm512_set1_ps(0.5f)));
  __m512 p = _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[5]));
  p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[4])));
  p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[3])));
  p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[2])));
  p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[1])));
  p = _mm512_fmadd_ps(p, t, _mm512_permutexvar_ps(i, _mm512_load_ps(mg_gelu_tab[0])));
  __m512 g = _mm512_mul_ps(na, p);  // GELU(-a)
  g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(na, _mm512_set1_ps(-5.99f), _CMP_LE_OQ), _mm512_set1_ps(-0.0f));
  // x > 0: GELU(x) = x + GELU(-x); else GELU(-a) itself (NaN: the compare is false, g is NaN)
  return _mm512_mask_add_ps(g, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), x, g);
}
