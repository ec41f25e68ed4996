// A small AVX-512 GEMM for the model's shapes, used by linear.cpp in place of OpenBLAS.
//
// Why it exists: the Debian OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise this machine's
// CPU (family 6 model 207) and falls back to its generic "Prescott" SSE3 kernels, ~20 GFLOP/s
// per core; OPENBLAS_CORETYPE=SkylakeX would fix it but must be in the environment before the
// library loads. This kernel reaches several times that on the shapes here (K = 64..1024,
// N = 64..600 columns) and sums every output element over k in order 0..K-1 in one FMA chain,
// so the result of an element does not depend on how M or N are split over threads.
//
// What it is not: a general BLAS. No K blocking or packing of A (K x 32 panels of B are read in
// place; at these sizes they sit in L1/L2), fp32 only.
#pragma once

#include <cstdint>

namespace minigpt::cpu {

// True when the CPU runs AVX-512F (checked once with __builtin_cpu_supports).
bool gemm_avx512_available();

// C (M, N) = [C +] A (M, K) B (K, N), where A(m, k) = A[m * a_rs + k * a_cs] (either layout,
// or a transposed view), B row-major with leading dimension ldb, C row-major with ldc.
// accumulate = false overwrites C. Requires gemm_avx512_available().
void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                 const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);

// dst (cols, rows) = src (rows, cols)^T; lds, ldd are the row strides. Requires avx512.
void transpose_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst,
                      int64_t ldd);

// Panel-major B for gemm_avx512 called on one 32-column panel at a time: panel p holds
// columns [32 p, 32 p + 32) of B as a contiguous (K, 32) block (ldb = 32), so the kernel reads
// B sequentially instead of at a power-of-two row stride (L1 set conflicts at 256 floats).
// dst needs ceil(N / 32) * 32 * K floats; columns past N in the last panel are left unwritten
// (the kernel's masked loads never read them).
constexpr int64_t kGemmPanel = 32;
// B (K, N) row-major with leading dimension ldb -> panels.
void pack_panels(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);
// B = src^T, src (rows = N, cols = K) with leading dimension lds -> panels. Requires avx512.
void pack_panels_transposed_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds,
                                   float* dst);

// y[n] = [y[n] +] dot(x (K), W row n (K)) for n in [0, N): the one-row (decode) forward, where
// transposing W for gemm_avx512 would cost more than the product. Requires avx512.
void gemv_rows_avx512(int64_t N, int64_t K, const float* x, const float* W, int64_t ldw, float* y,
                      bool accumulate);

}  // namespace minigpt::cpu
