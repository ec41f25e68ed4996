// Softmax over the last dimension on the CPU: one op, several versions.
//
// x, y (rows, cols), row-major, contiguous; y may alias x. Semantics shared by every version
// and every backend (docs/ARCHITECTURE.md): a row holding a NaN or +inf gives a NaN row; an all -inf row
// gives a NaN row (as torch.softmax); [1e30, 0, -1e30] gives [1, 0, 0] exactly; rows == 0
// does nothing. cols >= 1 (checked).
//
//   softmax_reference  three passes in double; the oracle every test compares against.
//   softmax_naive      three passes in float, exp materialised in y (max, exp+sum, scale).
//   softmax_fused      online max and sum in one read pass of x that writes exp(x - running
//                      max) into y (std::exp once per element, as naive), then one pass over
//                      y that rescales each stretch of equal running max by exp(m_run - m) /
//                      sum (the sum kept in double so that 50257 terms stay within ~1e-6).
//   softmax_simd       fused + AVX2 or AVX-512 (active_isa(), core/isa.h) with a polynomial exp,
//                      rows split across the pool's threads. This is the production kernel.
//
// softmax_simd in detail: a thread's rows flow through a three-stage pipeline, in chunks of
// kSimdChunk floats (a V = 600 row is one chunk): while stage 2 computes the exps of one chunk
// into an L1/L2 scratch buffer (against the running max: online softmax), stage 1 takes the
// max of the next chunk or row, whose loads come from memory, and stage 3 writes the previous
// row out of its scratch, times exp(m_chunk - m) / sum. The three run in one loop, so that
// reads and writes of memory interleave line by line with the arithmetic, as in a copy loop;
// with separate passes (max, exps, write) memory sat idle during the arithmetic, and the
// kernel ran at 0.51-0.64 of the copy ceiling at the large shapes on the GPU host's Xeon (2
// threads); now 0.62-0.84 at 2 threads and 0.80-0.82 at 16, where each core's share of the
// memory's bandwidth is small enough for the exps to hide under it
// (experiments/24-triton-and-pytorch has the runs, and what bounds them).
// Stage 1 also prefetches 16 KiB ahead into L2 (kPrefetchFloats, softmax_simd_ops.h). Each
// element's exp is computed once for rows up to kScratchFloats (64k floats); longer rows take
// two passes and compute it twice. When the output is larger than kStreamBytes, stage 3 uses
// non-temporal stores (y is not read into the cache first); its stores always start at y's
// next line (rows of 600 floats start mid-line every other row). Rows are split over the
// pool's threads in contiguous blocks of at least 8k floats.
//
// The polynomial exp (exp_poly, shared by every ISA): n = round(x / ln2) (by the 1.5 * 2^23
// shift), r = x - n ln2 (ln2 split hi/lo), exp(r) by a degree-6 minimax polynomial with its
// two leading coefficients fixed at 1 (Horner, 6 FMAs; softmax_simd_ops.h), times 2^n; 12
// vector ops per 16 (AVX-512) or 8 (AVX2) lanes. Domain x <= 0 (softmax only takes
// exp(x - max)); exp(-inf) = 0, exp(NaN) = NaN.
// Results below FLT_MIN (x < -87.3365) are flushed to 0 (their weight in a row that sums to 1
// is < 1.2e-38). Measured max error, against exp in double, over every float in
// [-87.3365, 0] (tests/softmax_cpu_test.cpp, SoftmaxExpPoly.FullSweep, all ~1.1e9 of them):
// 0.882 ulp on AVX2 and AVX-512 (worst at x = -26.68565), so kExpPolyMaxUlp = 1. (SLEEF's
// degree-7 polynomial, used before, measured 0.986 ulp in 15 ops.) Tests give simd
// (kExpPolyMaxUlp + 1) ulp plus the float sum's bound per chunk (softmax_cpu_test.cpp).
#pragma once

#include "core/isa.h"
#include "core/thread_pool.h"

#include <cstdint>
#include <vector>

namespace minigpt::cpu {

void softmax_reference(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_naive(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_fused(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_simd(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool& pool);

// The production entry point the model calls (softmax_simd).
inline void softmax(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool& pool) {
  softmax_simd(x, y, rows, cols, pool);
}

// --- for tests and the benchmark: each ISA (core/isa.h), and the exp on its own ---

inline constexpr int64_t kSimdChunk = 2048;               // floats per pipeline chunk (8 KiB)
// Output size from which simd's stores stream (non-temporal): below it y stays in the LLC for
// its reader. `minigpt bench softmax --device cpu -t 2 --simd-modes` re-measures it (simd
// with streaming forced on and off, beside the default, in the same rounds). Three runs on the
// GPU host's Xeon (2 MiB L2 per core, 300 MiB L3), 2 threads pinned (the first before the
// one-row scratch of softmax_simd_ops.h), on / off in us:
//   (32768, 600), y = 78.6 MB: 5117 / 9780, 5829 / 9315, 5657 / 8517;
//   (4096, 600),  y = 9.8 MB:  486 / 511, 697 / 670, 560 / 558;
//   (512, 600),   y = 1.2 MB:  56.4 / 56.5, 72.9 / 64.8, 42.2 / 39.6;
//   (64, 600):                 9.04 / 8.25, 11.15 / 10.18, 10.30 / 9.01.
// Streaming wins far beyond the LLC and loses or ties inside it; at 9.8 MB it is a tie, and a
// reader would then fetch y from DRAM instead of the LLC, so the threshold stays above that.
inline constexpr int64_t kStreamBytes = int64_t{32} << 20;
// Stage 1's prefetch runs at every size (SimdMode::Auto is on). It used to start at 1 MiB per
// thread: the two-pass kernel before the pipeline lost to it where x stays in L2 ((512, 600):
// 60.4 us without, 81.8 with). The pipeline does not: --simd-modes, same three runs, on / off:
// (64, 600) 8.26 / 8.58, 10.04 / 10.09, 8.79 / 8.89 us; (512, 600) 56.9 / 62.5, 64.5 / 65.1,
// 38.9 / 40.7; (4096, 600) 507 / 511, 666 / 659, 558 / 550; and from (32768, 600) up it
// saves 7-27%. Three more runs of the small shapes alone (--shapes 64x600,512x600,4096x600):
// (64, 600) 7.98 / 8.09, 8.78 / 8.95, 8.98 / 8.90; (512, 600) 56.5 / 57.5, 58.5 / 59.4,
// 59.6 / 59.9; (4096, 600), which prefetched under the old threshold too, 580 / 571, 542 / 526,
// 638 / 634: within the host's noise either way.
inline constexpr double kExpPolyMaxUlp = 1.0;             // measured 0.882; see above

// How softmax_simd_with stores and prefetches. Auto is softmax_simd's own choice: streaming
// by size (kStreamBytes), prefetch always; On and Off force it, for the tests and for
// `minigpt bench softmax --simd-modes`.
enum class SimdMode { Auto, On, Off };
// softmax_simd with a given ISA (Error if the CPU lacks it), store mode and prefetch.
void softmax_simd_with(Isa isa, SimdMode stream, SimdMode prefetch, const float* x, float* y,
                       int64_t rows, int64_t cols, ThreadPool& pool);
// y[i] = exp_poly(x[i]) with the given ISA's vector code (the same code softmax_simd runs).
void exp_poly(Isa isa, const float* x, float* y, int64_t n);

namespace detail {
// One ISA's kernels (softmax_avx2.cpp, softmax_avx512.cpp, softmax_simd.cpp for scalar):
// softmax of rows [0, rows) of x into y, single-threaded; stream = non-temporal stores,
// prefetch = software prefetch of the next span into L2.
void softmax_rows_scalar(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch);
void softmax_rows_avx2(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch);
void softmax_rows_avx512(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch);
void exp_poly_scalar(const float* x, float* y, int64_t n);
void exp_poly_avx2(const float* x, float* y, int64_t n);
void exp_poly_avx512(const float* x, float* y, int64_t n);
}  // namespace detail

}  // namespace minigpt::cpu
