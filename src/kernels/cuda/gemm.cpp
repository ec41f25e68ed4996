// cuBLAS GEMM glue (gemm.h): a pedantic-math handle and row-major wrappers.
#include "kernels/cuda/gemm.h"

#include "core/error.h"

#include <limits>

namespace minigpt::cuda {
namespace {

void check(cublasStatus_t status, const char* what) {
  MINIGPT_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuBLAS {} failed: {} ({})", what,
                cublasGetStatusString(status), static_cast<int>(status));
}

int to_int(int64_t v, const char* name) {
  MINIGPT_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "gemm: {} = {} out of range", name, v);
  return static_cast<int>(v);
}

}  // namespace

Cublas::Cublas(void* workspace, size_t workspace_bytes) {
  MINIGPT_CHECK(workspace != nullptr || workspace_bytes == 0, "cuBLAS: null workspace");
  check(cublasCreate(&handle_), "cublasCreate");
  try {
    // fp32 all the way: no TF32 tensor cores, no reduced-precision split-K reductions
    check(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode(PEDANTIC)");
    check(cublasSetWorkspace(handle_, workspace, workspace_bytes), "cublasSetWorkspace");
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Cublas::~Cublas() {
  if (handle_) cublasDestroy(handle_);
}

void gemm(const Cublas& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc, cudaStream_t stream) {
  MINIGPT_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative size m={} n={} k={}", m, n, k);
  if (m == 0 || n == 0) return;
  MINIGPT_CHECK(C != nullptr && (k == 0 || (A != nullptr && B != nullptr)), "gemm: null pointer");
  // row-major op(A) (m, k): stored rows of length k (not transposed) or m (transposed)
  MINIGPT_CHECK(lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n) && ldc >= n,
                "gemm: leading dimensions lda={} ldb={} ldc={} too small for m={} n={} k={}", lda,
                ldb, ldc, m, n, k);
  check(cublasSetStream(blas.get(), stream), "cublasSetStream");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep
  // each one's transpose flag (a row-major matrix read column-major is its transpose).
  check(cublasSgemm(blas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(n, "n"), to_int(m, "m"),
                    to_int(k, "k"), &alpha, B, to_int(ldb, "ldb"), A, to_int(lda, "lda"), &beta, C,
                    to_int(ldc, "ldc")),
        "cublasSgemm");
}

void linear_gemm(const Cublas& blas, const float* x, const float* W, float* y, int64_t M,
                 int64_t K, int64_t N, cudaStream_t stream) {
  gemm(blas, false, true, M, N, K, 1.0f, x, K, W, K, 0.0f, y, N, stream);
}

}  // namespace minigpt::cuda
