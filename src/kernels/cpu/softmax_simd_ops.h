// Internal to softmax_simd (not part of the kernel's API): the polynomial exp's constants,
// which every ISA shares, the three-stage pipeline (the step each vector ISA implements, the
// row loop they share) for rows that fit in scratch, and the two-pass row driver for longer
// rows. The intrinsics live
// in softmax_avx2.cpp and softmax_avx512.cpp; the scalar fallback, the two-pass driver and the
// dispatch in softmax_simd.cpp.
#pragma once

#include "core/tensor.h"
#include "kernels/cpu/simd_align.h"
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace minigpt::cpu::detail {

// exp(x) = 2^n * exp(r), n = round(x log2 e), r = x - n ln2 in [-ln2/2, ln2/2].
inline constexpr float kExpPolyLo = -87.33654475f;         // ln(FLT_MIN); below: flushed to 0
inline constexpr float kLog2e = 1.44269504088896341f;
// 1.5 * 2^23: x * log2e + kRoundShift rounds x * log2e to the nearest integer n (ties to even)
// in one FMA, leaving n in the low mantissa bits; subtracting it again gives n as a float.
inline constexpr float kRoundShift = 12582912.0f;
inline constexpr float kLn2Hi = 0.693145751953125f;        // 16 significant bits: n * kLn2Hi exact
inline constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln2 - kLn2Hi
// exp(r) ~ 1 + r (1 + r (C2 + r (C3 + r (C4 + r (C5 + r C6))))): a degree-6 polynomial with
// the two leading coefficients fixed at 1, fitted for minimax relative error on [-ln2/2, ln2/2]
// (Lawson-weighted least squares in double: 3.1e-9, 0.05 ulp, before float evaluation),
// evaluated by Horner in 6 FMAs. It replaced SLEEF's degree-7 form (8 vector ops) with the
// same ~1 ulp: see softmax.h for the measured error.
inline constexpr float kExpC6 = 0.001381461275741458f;
inline constexpr float kExpC5 = 0.008368710055947304f;
inline constexpr float kExpC4 = 0.04166838899254799f;
inline constexpr float kExpC3 = 0.1666652113199234f;
inline constexpr float kExpC2 = 0.4999999403953552f;

// One step of the row pipeline (softmax_avx2.cpp, softmax_avx512.cpp) over one chunk: three
// independent stages in one loop, so that the loads of stage 1 and the stores of stage 3
// interleave line by line with the arithmetic of stage 2, as a copy loop interleaves its loads
// and stores. Any stage may be absent (length 0), as while the pipeline fills and drains. Each
// ISA's row loop passes it by value to an inlined step (its fields stay in registers).
struct PipelineSpan {
  // Stage 1: the max of the span after stage 2's (the next chunk, or the next row's first),
  // whose loads come from memory (with prefetch, its bytes kPrefetchFloats ahead are asked
  // for too).
  const float* xn = nullptr;
  int64_t nn = 0;
  // Stage 2: e = exp_poly(x - m) into scratch, x loaded by stage 1 one step before (in L1).
  const float* x = nullptr;
  float* e = nullptr;
  int64_t n = 0;
  float m = 0.0f;
  // Stage 3: y = ep * factor, the previous row written out from its scratch (with streaming,
  // the aligned body goes out with non-temporal stores and the caller fences). ep is e (one
  // scratch row): the step reads each element of ep before stage 2 overwrites it.
  const float* ep = nullptr;
  float* y = nullptr;
  int64_t np = 0;
  float factor = 0.0f;
};

// A step's results: stage 2's float sum of e (0 without stage 2) and stage 1's max (-inf
// without stage 1; a NaN in the span may or may not win).
struct SpanResult {
  float sum;
  float max;
};

// The bookkeeping of the row in stage 2, chunk by chunk (online softmax; plain arithmetic that
// each ISA's row loop inlines): m is the max so far, s the sum of exp(x - m) so far, rescaled
// by exp(m_old - m_new) when m grows; each chunk's exps use the m of their time, which stage 3
// corrects by exp(m_chunk - m).
struct OnlineRow {
  float m = -std::numeric_limits<float>::infinity();
  double s = 0.0;

  // Folds in the max of the chunk about to be summed; returns the m its exps must use.
  float begin_chunk(float chunk_max) {
    const float m_new = chunk_max > m ? chunk_max : m;  // a NaN chunk_max is dropped here ...
    if (m != -std::numeric_limits<float>::infinity() && m_new != m)
      s *= std::exp(static_cast<double>(m) - static_cast<double>(m_new));
    m = m_new;
    // While every value so far is -inf or NaN, exp(x - m) would be exp(-inf + inf) = NaN even
    // for a row that turns finite later. Against -FLT_MAX, -inf gives 0 and NaN stays NaN.
    return m == -std::numeric_limits<float>::infinity() ? -std::numeric_limits<float>::max() : m;
  }
  // ... but caught here: a NaN anywhere makes its exp, and so s, NaN, whatever m is. These are
  // the docs/ARCHITECTURE.md rows that come out all NaN: NaN or +inf in the row (m = +inf gives
  // exp(inf - inf) = NaN), or every value -inf.
  bool nan_row() const { return std::isnan(s) || !std::isfinite(m); }
  // The factor stage 3 applies to a chunk whose exps used m_chunk: exp(m_chunk - m) / s.
  float factor(float m_chunk) const {
    if (nan_row()) return std::numeric_limits<float>::quiet_NaN();
    return static_cast<float>((m_chunk == m ? 1.0 : std::exp(static_cast<double>(m_chunk) - m)) / s);
  }
};

// Rows up to this many floats go through the pipeline and keep exp(x - m) in scratch (one
// row of it, 256 KiB at most: L2), so that each element's exp is computed once; longer rows
// take two passes (softmax_rows_recompute) and compute it twice.
inline constexpr int64_t kScratchFloats = int64_t{1} << 16;

// Stage 1 prefetches its span this many floats ahead into L2 (prefetcht1): the hardware
// prefetcher stops at each 4 KiB page, and demand loads alone keep too few lines in flight for
// one core. On the GPU host's Xeon, 2 threads, (262144, 600): no prefetch 65.0 ms, 4 KiB ahead
// 51.1, 16 KiB 45.7, 64 KiB 44.8; (32768, 600): 6263, 3437, 3361, 3303 us (out-of-tree lab, the
// pipelined loop). prefetcht0 and prefetcht2 at 16 KiB: 51.9 and 51.4 ms at (262144, 600).
// Prefetches past the end of x are harmless (they never fault).
inline constexpr int64_t kPrefetchFloats = 4096;

// The pipeline's row loop, shared by the vector ISAs, for rows of up to kScratchFloats: the
// three stages of PipelineSpan, chunk by chunk. In step t, for each chunk k: stage 3 writes
// chunk k of row t - 1 from the scratch; stage 2 puts the exps of row t's chunk k into the
// same scratch, against the running max (OnlineRow), each line right after stage 3 has read
// it (the line is in L1 then: one scratch row instead of two halves its traffic with L2, which
// was 2-4% faster at every shape, 7 rounds, out-of-tree lab on the GPU host); stage 1 takes
// the max of the span after stage 2's, which is then in L1 when stage 2 gets there. With rows
// of one chunk (V = 600) a step is a row: stage 1 reads row t + 1 and stage 3 writes row t - 1.
// Stage 3 lags a whole row because a row's factors are known only after its last chunk.
//
// Ops supplies max(x, n) and step<kStream, kPrefetch>(PipelineSpan). The loop is always_inline
// so that it is compiled inside each ISA's entry point (softmax_avx2.cpp, softmax_avx512.cpp),
// under that function's target attribute, where the compiler then inlines Ops::step too; as a
// function of its own it would be built for the baseline ISA and call the step once per chunk,
// which measured 10-20% slower at (32, 600). (Ops::step itself must not be always_inline: GCC
// refuses to force a target-specific function into this untargeted template.) The caller
// fences after streaming stores.
template <class Ops, bool kStream, bool kPrefetch>
__attribute__((always_inline)) inline void pipelined_rows(const float* x, float* y, int64_t rows,
                                                          int64_t cols) {
  // Rows of one chunk keep their scratch on the stack (an allocation cost 3-5% at (32, 600)).
  alignas(64) float small[kSimdChunk];
  Tensor scratch = cols <= kSimdChunk ? Tensor() : Tensor::empty({cols});  // 64-byte aligned
  float* const e = cols <= kSimdChunk ? small : scratch.data();
  // Chunk k of a row starts at k * kSimdChunk; the span after a row's last chunk is the next
  // row's first (rows are contiguous).
  const int64_t chunks = (cols + kSimdChunk - 1) / kSimdChunk;
  auto chunk_len = [&](int64_t k) { return std::min(kSimdChunk, cols - k * kSimdChunk); };
  float chunk_m[kScratchFloats / kSimdChunk];  // the m row t's exps used, by chunk
  float factor[kScratchFloats / kSimdChunk];   // row t - 1's stage 3 factors, by chunk
  float mc = Ops::max(x, chunk_len(0));        // the max of the span stage 2 does next
  for (int64_t t = 0; t <= rows; ++t) {        // step rows only drains stage 3
    OnlineRow row;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t c0 = k * kSimdChunk, n = chunk_len(k);
      PipelineSpan p;
      if (t < rows) {
        const float* xr = x + t * cols;
        if (k + 1 < chunks) p.xn = xr + c0 + n, p.nn = chunk_len(k + 1);
        else if (t + 1 < rows) p.xn = xr + cols, p.nn = chunk_len(0);
        p.x = xr + c0, p.e = e + c0, p.n = n, p.m = chunk_m[k] = row.begin_chunk(mc);
      }
      if (t > 0) p.ep = e + c0, p.y = y + (t - 1) * cols + c0, p.np = n, p.factor = factor[k];
      const SpanResult r = Ops::template step<kStream, kPrefetch>(p);
      row.s += r.sum;
      mc = r.max;
    }
    for (int64_t k = 0; k < chunks; ++k) factor[k] = row.factor(chunk_m[k]);
  }
}

// The primitives of the two-pass path for rows longer than kScratchFloats (unaligned pointers
// allowed): the max of n >= 1 floats (NaN may or may not win), the sum of exp_poly(x - m) in
// float lanes, the write y = exp_poly(x - m) * scale (stream: non-temporal stores for the
// aligned body), and the fence after streaming stores.
struct SimdOps {
  float (*max)(const float* x, int64_t n);
  float (*sum_exp)(const float* x, int64_t n, float m);
  void (*write)(const float* x, float* y, int64_t n, float m, float scale, bool stream);
  void (*fence)();
};

// Softmax of rows [0, rows) by two passes over each row (softmax_simd.cpp), single-threaded:
// pass 1 sums the exps chunk by chunk with a running max (online softmax), pass 2 recomputes
// them in the write. For rows longer than kScratchFloats, and for the scalar fallback.
void softmax_rows_recompute(const SimdOps& ops, const float* x, float* y, int64_t rows,
                            int64_t cols, bool stream);

}  // namespace minigpt::cpu::detail
