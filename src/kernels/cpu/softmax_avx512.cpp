// softmax_simd's AVX-512 kernels: the polynomial exp on 16 lanes, the pipeline step (and the
// shared row loop of softmax_simd_ops.h compiled around it) for rows that fit in scratch, and
// the primitives (max, sum of exp, scaled-exp write) of the two-pass driver in
// softmax_simd.cpp for longer rows.
// Every function carries __attribute__((target("avx512f"))) so that this file builds without
// -mavx512f; softmax_simd.cpp only calls it after cpu_supports(Isa::Avx512).
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

#include <algorithm>
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
    if (const int64_t h = head_to_boundary<64>(y, n); h > 0) {
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

// The three stages of PipelineSpan (softmax_simd_ops.h), two vectors of each per iteration
// while all three run, then what is left of each on its own, the last vector masked. Stage 3
// reads each scratch element before stage 2 writes it (they share the scratch): its head
// goes first, its loads come first in the loop, and its rest goes before stage 2's.
template <bool kStream, bool kPrefetch>
MINIGPT_AVX512 inline SpanResult pipeline_step(const PipelineSpan p) {
  const __m512 vm = _mm512_set1_ps(p.m), vf = _mm512_set1_ps(p.factor);
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), m0 = ninf, m1 = ninf;
  // Stage 3's body starts at y's next 64-byte boundary: vmovntps needs it, and ordinary
  // stores that straddle lines are slower (odd rows of 600 floats start mid-line; aligning
  // them was 3-11% faster at (32-512, 600) in four of five out-of-tree lab comparisons, 2
  // threads, host and VM).
  const int64_t head = head_to_boundary<64>(p.y, p.np);
  if (head > 0) _mm512_mask_storeu_ps(p.y, first_lanes(head), _mm512_mul_ps(_mm512_maskz_loadu_ps(first_lanes(head), p.ep), vf));
  const float* ep = p.ep + head;
  float* y = p.y + head;
  int64_t i = 0;
  if (p.nn > 0 && p.n > 0 && p.np > 0) {
    const int64_t all = std::min({p.nn, p.n, p.np - head});
    for (; i + 2 * kLanes <= all; i += 2 * kLanes) {
      if constexpr (kPrefetch) {  // why and how far ahead: softmax_simd_ops.h
        _mm_prefetch(reinterpret_cast<const char*>(p.xn + i + kPrefetchFloats), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(p.xn + i + kPrefetchFloats + kLanes), _MM_HINT_T1);
      }
      const __m512 w0 = _mm512_mul_ps(_mm512_loadu_ps(ep + i), vf);
      const __m512 w1 = _mm512_mul_ps(_mm512_loadu_ps(ep + i + kLanes), vf);
      m0 = _mm512_max_ps(m0, _mm512_loadu_ps(p.xn + i));
      m1 = _mm512_max_ps(m1, _mm512_loadu_ps(p.xn + i + kLanes));
      const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.x + i), vm));
      const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.x + i + kLanes), vm));
      _mm512_storeu_ps(p.e + i, e0);
      _mm512_storeu_ps(p.e + i + kLanes, e1);
      s0 = _mm512_add_ps(s0, e0);
      s1 = _mm512_add_ps(s1, e1);
      if constexpr (kStream) {
        _mm512_stream_ps(y + i, w0);
        _mm512_stream_ps(y + i + kLanes, w1);
      } else {
        _mm512_storeu_ps(y + i, w0);
        _mm512_storeu_ps(y + i + kLanes, w1);
      }
    }
  }
  // The rest of each stage, one vector at a time, the last one masked: stage 3 first.
  int64_t j = head + i;
  for (; j + kLanes <= p.np; j += kLanes) {
    const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(p.ep + j), vf);
    if constexpr (kStream) _mm512_stream_ps(p.y + j, w);
    else _mm512_storeu_ps(p.y + j, w);
  }
  if (j < p.np) {
    const __mmask16 k = first_lanes(p.np - j);
    _mm512_mask_storeu_ps(p.y + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p.ep + j), vf));
  }
  for (j = i; j < std::max(p.nn, p.n); j += kLanes) {
    if (j < p.nn) m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(ninf, first_lanes(std::min<int64_t>(p.nn - j, kLanes)), p.xn + j));
    if (j < p.n) {
      const __mmask16 k = first_lanes(std::min<int64_t>(p.n - j, kLanes));
      const __m512 v = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p.x + j), vm)));
      _mm512_mask_storeu_ps(p.e + j, k, v);
      s0 = _mm512_add_ps(s0, v);
    }
  }
  return {_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)), _mm512_reduce_max_ps(_mm512_max_ps(m0, m1))};
}

// The ISA's two pieces of the shared row loop (pipelined_rows, softmax_simd_ops.h).
struct Avx512Pipeline {
  MINIGPT_AVX512 static float max(const float* x, int64_t n) { return max_avx512(x, n); }
  template <bool kStream, bool kPrefetch>
  MINIGPT_AVX512 static SpanResult step(const PipelineSpan& p) { return pipeline_step<kStream, kPrefetch>(p); }
};

// pipelined_rows compiled for this ISA (it is always_inline: its body lands here, under the
// target attribute, with the step inlined).
template <bool kStream, bool kPrefetch>
MINIGPT_AVX512 void pipelined_rows_avx512(const float* x, float* y, int64_t rows, int64_t cols) {
  pipelined_rows<Avx512Pipeline, kStream, kPrefetch>(x, y, rows, cols);
  if constexpr (kStream) _mm_sfence();
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
  if (rows == 0) return;
  if (cols > kScratchFloats) {
    softmax_rows_recompute({max_avx512, sum_exp_avx512, write_avx512, fence_avx512}, x, y, rows, cols, stream);
    return;
  }
  const auto rows_fn = stream ? (prefetch ? pipelined_rows_avx512<true, true> : pipelined_rows_avx512<true, false>)
                              : (prefetch ? pipelined_rows_avx512<false, true> : pipelined_rows_avx512<false, false>);
  rows_fn(x, y, rows, cols);
}

}  // namespace minigpt::cpu::detail
