// Internal to softmax_simd (not part of the kernel's API): the polynomial exp's constants,
// which every ISA shares, and the row driver that turns four per-ISA span primitives into the
// chunked online softmax. The intrinsics live in softmax_avx2.cpp and softmax_avx512.cpp; the
// scalar fallback and the dispatch in softmax_simd.cpp.
#pragma once

#include <cstdint>

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

// One ISA's primitives over a span of n >= 1 floats (unaligned pointers allowed).
struct SimdOps {
  float (*max)(const float* x, int64_t n);               // NaN may or may not win; see driver
  float (*sum_exp)(const float* x, int64_t n, float m);  // sum of exp_poly(x - m), float lanes
  // y = exp_poly(x - m) * scale; stream = non-temporal stores for the aligned body.
  void (*write)(const float* x, float* y, int64_t n, float m, float scale, bool stream);
  void (*fence)();                                       // after streaming stores
  // e = exp_poly(x - m), returns the float sum of e (pass 1 when the row fits in scratch);
  // meanwhile *next_max = max of xn[0, nn) (the next span: its loads from memory overlap
  // this span's arithmetic, which runs on data already in L1), and with `prefetch` the bytes
  // kPrefetchFloats beyond it are asked for. nn may be 0 (*next_max = -inf).
  float (*exp_store_sum_max)(const float* x, float* e, int64_t n, float m, const float* xn,
                             int64_t nn, float* next_max, bool prefetch);
  // y = e * factor; stream as in write (pass 2 from scratch).
  void (*scale)(const float* e, float* y, int64_t n, float factor, bool stream);
};

// Rows up to this many floats keep exp(x - m) in a per-call scratch buffer (256 KiB: L2) so
// that each element's exp is computed once; longer rows recompute it in the write pass.
inline constexpr int64_t kScratchFloats = int64_t{1} << 16;

// exp_store_sum_max prefetches its next span (the bytes that come from DRAM) this many floats
// ahead into L2 (prefetcht1): one row of 600 floats ahead is too little to keep enough lines in
// flight for one core, and the hardware prefetcher stops at each 4 KiB page. 16 KiB ahead
// measured 7.2 -> 9.4 GB/s at (65536, 600) and 6.3 -> 9.2 at (1024, 50257) (the machine loaded).
// Prefetches past the end of x are harmless (they never fault).
inline constexpr int64_t kPrefetchFloats = 4096;

// Softmax of rows [0, rows) with the given primitives, single-threaded (softmax_simd.cpp).
void softmax_rows(const SimdOps& ops, const float* x, float* y, int64_t rows, int64_t cols,
                  bool stream, bool prefetch);

}  // namespace minigpt::cpu::detail
