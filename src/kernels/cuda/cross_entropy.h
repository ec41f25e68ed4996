// Softmax cross-entropy over the vocabulary fused with its gradient, on the GPU: the CUDA twin
// of kernels/cpu/cross_entropy.h (same semantics, tested against it).
//
// logits (N, V) on the device; targets (N) on the device, -1 = ignored position. count = the
// targets != -1. dlogits (N, V) = (softmax(logits) - onehot(target)) / count, zero rows for
// ignored positions; it may be logits itself (the LM head's backward then reads it in place).
// row_loss (N) scratch; *loss (one float on the device) = the mean over counted rows of
// logsumexp - logit[target] (0 if none), summed in double in row order. Targets outside
// [-1, V) are the caller's to refuse (the trainer checks the batch on the host).
// Two kernels (rows, then the fixed-order sum); no synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

void cross_entropy_forward_backward(const float* logits, const int32_t* targets, float* dlogits,
                                    double* row_loss, float* loss, int64_t N, int64_t V,
                                    cudaStream_t stream);

// Its two launches apart, for a caller that needs dlogits before the loss (the training step
// sums the loss on a side stream, off the backward's path): cross_entropy_rows_grad writes
// dlogits and row_loss; cross_entropy_mean_loss then writes *loss from them. Same bits.
void cross_entropy_rows_grad(const float* logits, const int32_t* targets, float* dlogits, double* row_loss,
                             int64_t N, int64_t V, cudaStream_t stream);
void cross_entropy_mean_loss(const double* row_loss, const int32_t* targets, float* loss, int64_t N,
                             cudaStream_t stream);

}  // namespace minigpt::cuda
