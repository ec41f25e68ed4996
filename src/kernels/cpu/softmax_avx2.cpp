// softmax_simd's AVX2 + FMA kernels: the polynomial exp on 8 lanes, the pipeline step (and
// the shared row loop of softmax_simd_ops.h compiled around it) for rows that fit in scratch,
// and the primitives (max, sum of exp, scaled-exp write) of the two-pass driver in
// softmax_simd.cpp for longer rows. Every function carries __attribute__((target("avx2,fma")))
// so that this file builds without -mavx2; softmax_simd.cpp only calls it after
// cpu_supports(Isa::Avx2) (AVX2 and FMA; core/isa.h). Tails use vmaskmovps (masked-off lanes are
// neither read nor written).
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/softmax_simd_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#define MINIGPT_AVX2 __attribute__((target("avx2,fma")))

namespace minigpt::cpu::detail {

namespace {

constexpr int kLanes = 8;

// Lane i active iff i < n (0 <= n <= 8), as vmaskmovps wants it (sign bit set).
MINIGPT_AVX2 inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp_poly on 8 lanes; the same steps as exp16 in softmax_avx512.cpp (method in softmax.h),
// with 2^n built in the exponent field (AVX2 has no vscalefps).
MINIGPT_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(kRoundShift);
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), shift);  // n in the low bits
  const __m256 n = _mm256_sub_ps(t, shift);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(kExpC6), r, _mm256_set1_ps(kExpC5));
  u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(kExpC4));
  u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(kExpC3));
  u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(kExpC2));
  u = _mm256_fmadd_ps(u, r, one);
  u = _mm256_fmadd_ps(u, r, one);
  // t's low 9 bits hold n mod 512; (n + 127) << 23 is 2^n for n in [-126, 0] (the bits above
  // are shifted out). Lanes with x < ln(FLT_MIN) get garbage here and are zeroed below; a NaN
  // x makes u NaN and the compare false, so it stays NaN.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(u, _mm256_castsi256_ps(bits));
  return _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kExpPolyLo), _CMP_LT_OQ));
}

MINIGPT_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

MINIGPT_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

MINIGPT_AVX2 float max_avx2(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + kLanes));
    m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 2 * kLanes));
    m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 3 * kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i k = first_lanes(n - i);
    const __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
    m1 = _mm256_max_ps(m1, v);
  }
  return hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

MINIGPT_AVX2 float sum_exp_avx2(const float* x, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
    s1 = _mm256_add_ps(s1, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + kLanes), vm)));
  }
  for (; i + kLanes <= n; i += kLanes)
    s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
  if (i < n) {
    const __m256i k = first_lanes(n - i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vm));
    s1 = _mm256_add_ps(s1, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
  }
  return hsum8(_mm256_add_ps(s0, s1));
}

// y = exp(x - m) * scale; stream: vmovntps (32-byte aligned) after a masked head.
MINIGPT_AVX2 void write_avx2(const float* x, float* y, int64_t n, float m, float scale,
                             bool stream) {
  const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  if (stream) {
    if (const int64_t h = head_to_boundary<32>(y, n); h > 0) {
      const __m256i k = first_lanes(h);
      const __m256 v = _mm256_maskload_ps(x, k);
      _mm256_maskstore_ps(y, k, _mm256_mul_ps(exp8(_mm256_sub_ps(v, vm)), vs));
      i = h;
    }
    for (; i + kLanes <= n; i += kLanes)
      _mm256_stream_ps(y + i, _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)), vs));
  } else {
    for (; i + kLanes <= n; i += kLanes)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)), vs));
  }
  if (i < n) {
    const __m256i k = first_lanes(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, k);
    _mm256_maskstore_ps(y + i, k, _mm256_mul_ps(exp8(_mm256_sub_ps(v, vm)), vs));
  }
}

MINIGPT_AVX2 void fence_avx2() { _mm_sfence(); }

// The three stages of PipelineSpan (softmax_simd_ops.h), two vectors (one line) of each per
// iteration while all three run, then what is left of each on its own, the last vector masked.
// Stage 3 reads each scratch element before stage 2 writes it (they share the scratch):
// its head goes first, its loads come first in the loop, and its rest goes before stage 2's.
template <bool kStream, bool kPrefetch>
MINIGPT_AVX2 inline SpanResult pipeline_step(const PipelineSpan p) {
  const __m256 vm = _mm256_set1_ps(p.m), vf = _mm256_set1_ps(p.factor);
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), m0 = ninf, m1 = ninf;
  // Stage 3's body starts at y's next 32-byte boundary: vmovntps needs it, and stores that
  // straddle lines are slower (measured with the AVX-512 loop: softmax_avx512.cpp).
  const int64_t head = head_to_boundary<32>(p.y, p.np);
  if (head > 0) _mm256_maskstore_ps(p.y, first_lanes(head), _mm256_mul_ps(_mm256_maskload_ps(p.ep, first_lanes(head)), vf));
  const float* ep = p.ep + head;
  float* y = p.y + head;
  int64_t i = 0;
  if (p.nn > 0 && p.n > 0 && p.np > 0) {
    const int64_t all = std::min({p.nn, p.n, p.np - head});
    for (; i + 2 * kLanes <= all; i += 2 * kLanes) {
      // why and how far ahead: softmax_simd_ops.h
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p.xn + i + kPrefetchFloats), _MM_HINT_T1);
      const __m256 w0 = _mm256_mul_ps(_mm256_loadu_ps(ep + i), vf);
      const __m256 w1 = _mm256_mul_ps(_mm256_loadu_ps(ep + i + kLanes), vf);
      m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p.xn + i));
      m1 = _mm256_max_ps(m1, _mm256_loadu_ps(p.xn + i + kLanes));
      const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.x + i), vm));
      const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.x + i + kLanes), vm));
      _mm256_storeu_ps(p.e + i, e0);
      _mm256_storeu_ps(p.e + i + kLanes, e1);
      s0 = _mm256_add_ps(s0, e0);
      s1 = _mm256_add_ps(s1, e1);
      if constexpr (kStream) {
        _mm256_stream_ps(y + i, w0);
        _mm256_stream_ps(y + i + kLanes, w1);
      } else {
        _mm256_storeu_ps(y + i, w0);
        _mm256_storeu_ps(y + i + kLanes, w1);
      }
    }
  }
  // The rest of each stage, one vector at a time, the last one masked: stage 3 first.
  int64_t j = head + i;
  for (; j + kLanes <= p.np; j += kLanes) {
    const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(p.ep + j), vf);
    if constexpr (kStream) _mm256_stream_ps(p.y + j, w);
    else _mm256_storeu_ps(p.y + j, w);
  }
  if (j < p.np) {
    const __m256i k = first_lanes(p.np - j);
    _mm256_maskstore_ps(p.y + j, k, _mm256_mul_ps(_mm256_maskload_ps(p.ep + j, k), vf));
  }
  for (j = i; j < std::max(p.nn, p.n); j += kLanes) {
    if (j < p.nn) {
      const __m256i k = first_lanes(std::min<int64_t>(p.nn - j, kLanes));
      m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, _mm256_maskload_ps(p.xn + j, k), _mm256_castsi256_ps(k)));
    }
    if (j < p.n) {
      const __m256i k = first_lanes(std::min<int64_t>(p.n - j, kLanes));
      const __m256 v = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(p.x + j, k), vm)), _mm256_castsi256_ps(k));
      _mm256_maskstore_ps(p.e + j, k, v);
      s0 = _mm256_add_ps(s0, v);
    }
  }
  return {hsum8(_mm256_add_ps(s0, s1)), hmax8(_mm256_max_ps(m0, m1))};
}

// The ISA's two pieces of the shared row loop (pipelined_rows, softmax_simd_ops.h).
struct Avx2Pipeline {
  MINIGPT_AVX2 static float max(const float* x, int64_t n) { return max_avx2(x, n); }
  template <bool kStream, bool kPrefetch>
  MINIGPT_AVX2 static SpanResult step(const PipelineSpan& p) { return pipeline_step<kStream, kPrefetch>(p); }
};

// pipelined_rows compiled for this ISA (it is always_inline: its body lands here, under the
// target attribute, with the step inlined).
template <bool kStream, bool kPrefetch>
MINIGPT_AVX2 void pipelined_rows_avx2(const float* x, float* y, int64_t rows, int64_t cols) {
  pipelined_rows<Avx2Pipeline, kStream, kPrefetch>(x, y, rows, cols);
  if constexpr (kStream) _mm_sfence();
}

}  // namespace

MINIGPT_AVX2 void exp_poly_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i k = first_lanes(n - i);
    _mm256_maskstore_ps(y + i, k, exp8(_mm256_maskload_ps(x + i, k)));
  }
}

void softmax_rows_avx2(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch) {
  if (rows == 0) return;
  if (cols > kScratchFloats) {
    softmax_rows_recompute({max_avx2, sum_exp_avx2, write_avx2, fence_avx2}, x, y, rows, cols, stream);
    return;
  }
  const auto rows_fn = stream ? (prefetch ? pipelined_rows_avx2<true, true> : pipelined_rows_avx2<true, false>)
                              : (prefetch ? pipelined_rows_avx2<false, true> : pipelined_rows_avx2<false, false>);
  rows_fn(x, y, rows, cols);
}

}  // namespace minigpt::cpu::detail
