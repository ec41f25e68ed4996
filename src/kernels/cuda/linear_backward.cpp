// Linear backward on the GPU (linear.h): the two products through cuBLAS (gemm.h, row-major
// wrappers, pedantic fp32: no TF32) and the bias gradient by bias_backward.
#include "kernels/cuda/linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"

namespace minigpt::cuda {

void linear_backward(const Cublas& blas, const float* x, const float* W, const float* dy, float* dx,
                     float* dW, float* db, int64_t N, int64_t in, int64_t out, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && in >= 1 && out >= 1, "linear_backward: bad sizes N=", N, " in=", in,
                       " out=", out);
  // dx (N, in) = dy (N, out) @ W (out, in)
  if (dx) gemm(blas, false, false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in, stream);
  // dW (out, in) = dy^T (out, N) @ x (N, in)
  gemm(blas, true, false, out, in, N, 1.0f, dy, out, x, in, 0.0f, dW, in, stream);
  if (db) bias_backward(dy, db, N, out, stream);
}

}  // namespace minigpt::cuda
