// GEMM through cuBLAS for the Linear layers (forward here; the backward's dx = dy W and
// dW += dy^T x are calls of the same gemm()). fp32 inputs, outputs and accumulation, with the
// handle in CUBLAS_PEDANTIC_MATH: no TF32, no reduced-precision reductions, so results agree
// with the CPU engine to ~1e-6 (cuBLAS's order of the sum over k differs from ours).
//
// Row-major throughout (cuBLAS is column-major: the wrappers swap operands). The handle is
// bound to a stream per call and given a workspace from the caller (an arena slot), so a call
// allocates nothing and can be captured into a CUDA graph. What this file does not do: the
// bias/GELU/residual epilogue (linear.h's linear_epilogue), batched or strided GEMMs.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace minigpt::cuda {

class Cublas {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{4} << 20;  // what cuBLAS asks for on Hopper

  // cublasCreate + CUBLAS_PEDANTIC_MATH; workspace (kWorkspaceBytes of device memory, the
  // caller's, outliving this handle) is set so cuBLAS never allocates during a capture.
  explicit Cublas(void* workspace, size_t workspace_bytes = kWorkspaceBytes);
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Row-major C (m, n) = alpha op(A) op(B) + beta C, op(A) (m, k), op(B) (k, n); lda, ldb, ldc are
// the row strides of A, B, C as stored. m, n or k == 0: C = beta C (k == 0) or nothing.
void gemm(const Cublas& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc, cudaStream_t stream);

// y (M, N) = x (M, K) W^T, W (N, K) as nn.Linear; no bias (linear_epilogue adds it).
void linear_gemm(const Cublas& blas, const float* x, const float* W, float* y, int64_t M,
                 int64_t K, int64_t N, cudaStream_t stream);

}  // namespace minigpt::cuda
