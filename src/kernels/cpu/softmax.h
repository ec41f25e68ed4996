// Softmax over the last dimension on the CPU: one op, several versions.
//
// x, y (rows, cols), row-major, contiguous; y may alias x. Semantics shared by every version
// and every backend (design.md): a row holding a NaN or +inf gives a NaN row; an all -inf row
// gives a NaN row (as torch.softmax); [1e30, 0, -1e30] gives [1, 0, 0]; rows == 0 does
// nothing. cols >= 1.
//
//   softmax_reference  three passes in double; the oracle every test compares against.
//   softmax_naive      three passes in float, exp materialised in y (max, exp+sum, scale).
//   softmax_fused      online max and sum in one read pass, then one write pass.
//   softmax_simd       fused + AVX2 or AVX-512 (chosen at run time) with a polynomial exp,
//                      rows split across the pool's threads. This is the production kernel.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>
#include <string>
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

// Which instruction set softmax_simd uses on this machine: "avx512", "avx2" or "scalar".
std::string softmax_simd_isa();

}  // namespace minigpt::cpu
