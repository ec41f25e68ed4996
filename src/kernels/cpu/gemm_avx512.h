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

// What happens to a finished sum s = sum_k A(m, k) B(k, n) on its way to C, in this order,
// each step optional (fused into the store, so C is written once and nothing is re-read):
//   s = s + C(m, n)          accumulate (dW += ..., as BLAS beta = 1)
//   s = s + bias[n]          a Linear's bias
//   s = s + residual(m, n)   a residual connection (residual may be C itself: in place)
//   s = s * scale(m, n)      an elementwise factor (the GELU' saved by the forward)
//   C(m, n) = s, or with gelu: C(m, n) = GELU(s) and, if gelu_grad, gelu_grad(m, n) = GELU'(s)
//   (vec_math_avx512.h, float).
// The pointers address element (0, 0) of the whole product; a call on a block of it says where
// the block starts (gemm_avx512's ep_i0, ep_j0).
struct GemmEpilogue {
  bool accumulate = false;
  const float* bias = nullptr;      // (N)
  const float* residual = nullptr;  // (M, N), leading dimension ldr
  int64_t ldr = 0;
  const float* scale = nullptr;     // (M, N), leading dimension lds
  int64_t lds = 0;
  bool gelu = false;
  float* gelu_grad = nullptr;       // (M, N), leading dimension ldg
  int64_t ldg = 0;
};

// C (M, N) = epilogue(A (M, K) B (K, N)), where A(m, k) = A[m * a_rs + k * a_cs] (either
// layout, or a transposed view), B row-major with leading dimension ldb, C row-major with ldc.
// C's element (0, 0) is element (ep_i0, ep_j0) of the epilogue's arrays (a block of a larger
// product). Requires an AVX-512 CPU: callers run it only when active_isa() is Isa::Avx512.
void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                 const float* B, int64_t ldb, float* C, int64_t ldc, const GemmEpilogue& ep,
                 int64_t ep_i0 = 0, int64_t ep_j0 = 0);

// dst (cols, rows) = src (rows, cols)^T; lds, ldd are the row strides. Requires avx512.
void transpose_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst,
                      int64_t ldd);

// Panel-major B for gemm_avx512 called on one 32-column panel at a time: panel p holds
// columns [32 p, 32 p + 32) of B as a contiguous (K, 32) block (ldb = 32), so the kernel reads
// B sequentially instead of at a power-of-two row stride (L1 set conflicts at 256 floats).
// dst needs ceil(N / 32) * 32 * K floats; columns past N in the last panel are left unwritten
// (the kernel's masked loads never read them).
constexpr int64_t kGemmPanel = 32;
constexpr int64_t kGemmTileRows = 12;  // rows of C per micro-tile (12 x 2 zmm accumulators)
// B (K, N) row-major with leading dimension ldb -> panels. Requires avx512.
void pack_panels_avx512(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);
// B = src^T, src (rows = N, cols = K) with leading dimension lds -> panels. Requires avx512.
void pack_panels_transposed_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds,
                                   float* dst);

// y[n] = dot(x (K), W row n (K)) [+ bias[n]] [+ residual[n]] for n in [0, N) (null pointers
// skip their term; residual may be y): the one-row (decode) forward, where transposing W for
// gemm_avx512 would cost more than the product. Requires avx512.
void gemv_rows_avx512(int64_t N, int64_t K, const float* x, const float* W, int64_t ldw, float* y,
                      const float* bias, const float* residual);

}  // namespace minigpt::cpu
