// Linear layer on the GPU with its neighbours fused, fp32: y = x W^T + b as nn.Linear, with an
// optional LayerNorm of x's rows before it (prologue) and GELU / a residual add after it
// (epilogue), so (ln1 + qkv), (ln2 + fc1 + GELU), (proj + residual) and (fc2 + residual) are one
// kernel each. The CPU references are kernels/cpu/linear.h, layernorm.h and gelu.h.
//
// Shapes: x (M, K), W (N, K) (out, in), b (N) or null, y (M, N), residual (M, N); row-major,
// contiguous. Sums over K run in float, in K order per output (a cuBLAS GEMM sums in another
// order: results differ in the last bits). The arithmetic order matches the CPU's:
// y = act(((x W^T) + b) + residual) (the model uses GELU or a residual, never both).
//
// Also here: linear_epilogue, the same epilogue as its own kernel, for a y that a cuBLAS GEMM
// (gemm.h) wrote. M == 0 launches nothing. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
// Backward: linear_backward, at the end.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

struct LinearFusion {
  // Prologue: x's rows are layer-normed (weight, bias (K), eps; x itself is not written) before
  // the product. Both null: no LayerNorm.
  const float* ln_weight = nullptr;
  const float* ln_bias = nullptr;
  float ln_eps = 1e-5f;
  // Epilogue: residual (M, N), optional: added to x W^T + b; it may be y itself (each element
  // is read before it is written, by the same thread). Then y = GELU(...) (exact erf form) when
  // gelu; gelu_grad (M, N), optional, receives GELU' there (the backward's factor).
  bool gelu = false;
  float* gelu_grad = nullptr;
  const float* residual = nullptr;
};

// The fused kernel: y (M, N) = act(ln(x) W^T + b + residual).
void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t M,
                    int64_t K, int64_t N, const LinearFusion& fusion, cudaStream_t stream);

// y (M, N) = act(y + b + residual) in place: the epilogue after a GEMM that wrote x W^T into y.
// fusion's LayerNorm fields must be null (a prologue cannot run after the product).
void linear_epilogue(float* y, const float* b, int64_t M, int64_t N, const LinearFusion& fusion,
                     cudaStream_t stream);

// ---- backward (linear_backward.cu) -----------------------------------------------------

class Cublas;  // gemm.h

// Device scratch of linear_backward's weight-gradient kernel (split over rows, reduced in one
// launch): partial (floats), partial_db (doubles), counters (ints, all 0 before the first call;
// every call leaves them 0, so one scratch serves every Linear of a step, one after another on
// a stream, and graph replays). Sizes in elements from linear_backward_scratch.
struct LinearGradScratchSize {
  int64_t partial = 0, partial_db = 0, counters = 0;
};
LinearGradScratchSize linear_backward_scratch(int64_t N, int64_t in, int64_t out);
struct LinearGradScratch {
  float* partial = nullptr;
  double* partial_db = nullptr;
  int* counters = nullptr;
  LinearGradScratchSize size;
};

// The backward of y (N, out) = x (N, in) W^T + b, W (out, in), as the CPU's linear_backward but
// overwriting: dx (N, in) = dy W (a cuBLAS GEMM, gemm.h, pedantic fp32; skipped if dx is null),
// then ONE kernel for dW (out, in) = dy^T x (float, fixed order: the same bits every run) and
// db (out) = the column sums of dy (double; skipped if db is null). N >= 1. The backward
// through a fused GELU is gelu.h's gelu_backward_saved on dx.
void linear_backward(const Cublas& blas, const float* x, const float* W, const float* dy, float* dx,
                     float* dW, float* db, int64_t N, int64_t in, int64_t out,
                     const LinearGradScratch& scratch, cudaStream_t stream);

// linear_backward's two halves, for callers that put them on different streams (the training
// step runs the weight gradients on a side stream, beside the data gradients' chain): the same
// launches, the same bits. Both read only dy (and W or x), so they may run concurrently; calls
// sharing one scratch must stay in order on one stream.
void linear_backward_data(const Cublas& blas, const float* W, const float* dy, float* dx, int64_t N,
                          int64_t in, int64_t out, cudaStream_t stream);
void linear_backward_weights(const float* x, const float* dy, float* dW, float* db, int64_t N, int64_t in,
                             int64_t out, const LinearGradScratch& scratch, cudaStream_t stream);

}  // namespace minigpt::cuda
