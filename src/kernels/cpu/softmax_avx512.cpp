// softmax_simd's AVX-512 kernels: the polynomial exp on 16 lanes and the four span primitives
// (max, sum of exp, scaled-exp write, exp) that the row driver in softmax_simd.cpp calls.
// Every function carries __attribute__((target("avx512f"))) so that this file builds without
// -mavx512f; softmax_simd.cpp only calls it after __builtin_cpu_supports("avx512f").
// Tails are masked loads and stores (no scalar remainder loop, no read past the row).
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/softmax_simd_ops.h"

// GCC 12's avx512fintrin.h builds unmasked ops on a self-initialised _mm512_undefined_ps(),
// which -Wmaybe-uninitialized reports at every call site (a GCC bug, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <limits>

#define MINIGPT_AVX512 __attribute__((target("avx512f")))

namespace minigpt::cpu::detail {

namespace {

constexpr int kLanes = 16;

// The mask of the first n lanes (0 <= n <= 16).
MINIGPT_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// exp_poly on 16 lanes; the method and its measured error are in softmax.h. 12 vector ops.
MINIGPT_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 shift = _mm512_set1_ps(kRoundShift);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), shift), shift);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);  // exact: n (7 bits) x ln2_hi (16 bits)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 u = _mm512_fmadd_ps(_mm512_set1_ps(kExpC6), r, _mm512_set1_ps(kExpC5));
  u = _mm512_fmadd_ps(u, r, _mm512_set1_ps(kExpC4));
  u = _mm512_fmadd_ps(u, r, _mm512_set1_ps(kExpC3));
  u = _mm512_fmadd_ps(u, r, _mm512_set1_ps(kExpC2));
  u = _mm512_fmadd_ps(u, r, one);
  u = _mm512_fmadd_ps(u, r, one);  // exp(r), r in [-ln2/2, ln2/2]
  // u * 2^n by vscalefps, zeroed where x < ln(FLT_MIN) (the true result is below FLT_MIN;
  // -inf and huge negatives land here, with garbage n and r that the zeroing hides). The
  // compare is "not less than, unordered": a NaN x keeps its lane, and u is NaN there.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpPolyLo), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, u, n);
}

MINIGPT_AVX512 float max_avx512(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;  // four chains hide vmaxps latency
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + kLanes));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 2 * kLanes));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 3 * kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, first_lanes(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

MINIGPT_AVX512 float sum_exp_avx512(const float* x, int64_t n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
    s1 = _mm512_add_ps(s1, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + kLanes), vm)));
  }
  for (; i + kLanes <= n; i += kLanes)
    s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
  if (i < n) {
    const __mmask16 k = first_lanes(n - i);
    s1 = _mm512_add_ps(s1, _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm))));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// y = exp(x - m) * scale. stream: the aligned body goes out with non-temporal stores
// (vmovntps needs 64-byte alignment: a masked head brings y to it; the caller fences).
MINIGPT_AVX512 void write_avx512(const float* x, float* y, int64_t n, float m, float scale,
                                 bool stream) {
  const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(scale);
  int64_t i = 0;
  if (stream) {
    const int64_t head = ((64 - reinterpret_cast<uintptr_t>(y) % 64) % 64) / 4;  // y is 4-aligned
    if (head > 0) {
      const int64_t h = head < n ? head : n;
      const __mmask16 k = first_lanes(h);
      const __m512 v = _mm512_maskz_loadu_ps(k, x);
      _mm512_mask_storeu_ps(y, k, _mm512_mul_ps(exp16(_mm512_sub_ps(v, vm)), vs));
      i = h;
    }
    for (; i + kLanes <= n; i += kLanes)
      _mm512_stream_ps(y + i, _mm512_mul_ps(exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)), vs));
  } else {
    for (; i + kLanes <= n; i += kLanes)
      _mm512_storeu_ps(y + i, _mm512_mul_ps(exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)), vs));
  }
  if (i < n) {
    const __mmask16 k = first_lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(exp16(_mm512_sub_ps(v, vm)), vs));
  }
}

MINIGPT_AVX512 void fence_avx512() { _mm_sfence(); }

MINIGPT_AVX512 float exp_store_sum_max_avx512(const float* x, float* e, int64_t n, float m,
                                              const float* xn, int64_t nn, float* next_max,
                                              bool prefetch) {
  const __m512 vm = _mm512_set1_ps(m);
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), m0 = ninf, m1 = ninf;
  const int64_t both = n < nn ? n : nn;
  int64_t i = 0;
  for (; i + 2 * kLanes <= both; i += 2 * kLanes) {
    if (prefetch) {  // xn is the stream that comes from memory: ask for it kPrefetchFloats ahead, into L2
      _mm_prefetch(reinterpret_cast<const char*>(xn + i + kPrefetchFloats), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(xn + i + kPrefetchFloats + kLanes), _MM_HINT_T1);
    }
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(xn + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(xn + i + kLanes));
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + kLanes), vm));
    _mm512_storeu_ps(e + i, e0);
    _mm512_storeu_ps(e + i + kLanes, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (int64_t j = i; j < n; j += kLanes) {  // the rest of this span, the last vector masked
    const __mmask16 k = first_lanes(n - j < kLanes ? n - j : kLanes);
    const __m512 v = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm)));
    _mm512_mask_storeu_ps(e + j, k, v);
    s0 = _mm512_add_ps(s0, v);
  }
  for (int64_t j = i; j < nn; j += kLanes) {  // the rest of the next span
    const __mmask16 k = first_lanes(nn - j < kLanes ? nn - j : kLanes);
    m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(ninf, k, xn + j));
  }
  *next_max = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

MINIGPT_AVX512 void scale_avx512(const float* e, float* y, int64_t n, float factor, bool stream) {
  const __m512 vf = _mm512_set1_ps(factor);
  int64_t i = 0;
  if (stream) {
    const int64_t head = ((64 - reinterpret_cast<uintptr_t>(y) % 64) % 64) / 4;
    if (head > 0) {
      const int64_t h = head < n ? head : n;
      const __mmask16 k = first_lanes(h);
      _mm512_mask_storeu_ps(y, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e), vf));
      i = h;
    }
    for (; i + kLanes <= n; i += kLanes) _mm512_stream_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), vf));
  } else {
    for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), vf));
  }
  if (i < n) {
    const __mmask16 k = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e + i), vf));
  }
}

}  // namespace

MINIGPT_AVX512 void exp_poly_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 k = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

void softmax_rows_avx512(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch) {
  const SimdOps ops{max_avx512,   sum_exp_avx512,       write_avx512,
                    fence_avx512, exp_store_sum_max_avx512, scale_avx512};
  softmax_rows(ops, x, y, rows, cols, stream, prefetch);
}

}  // namespace minigpt::cpu::detail
