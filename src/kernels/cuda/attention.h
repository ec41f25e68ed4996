// Causal multi-head self-attention core on the GPU (between the qkv and proj Linears), fp32,
// fused per head: scores, the causal mask, the softmax and the weighted sum of values in one
// kernel, with the scores kept on chip (no (T, T) matrix in global memory). The CPU reference
// is kernels/cpu/attention.h (same layout, scale 1/sqrt(dh), masked positions skipped).
//
// Layout: qkv (B, T, 3C) = [q | k | v] along the last dim, head h at columns [h*dh, (h+1)*dh)
// of each part; out (B, T, C) with heads concatenated. dh = C / NH must be 8, 16, 32 or 64.
// Any T >= 1 (keys are streamed through shared memory in tiles with an online softmax).
// B == 0 launches nothing. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
// Backward: attention_backward, below.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

// lse (B, NH, T), optional (null at inference): each row's log-sum-exp of the scaled scores,
// what a flash-style backward needs to rebuild the probabilities.
void attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream);

// One decode position of one sequence, read on the device (*pos, 0-based, so a captured graph
// replays with new values): qkv (3C) of the new token; its k and v are first written to row
// *pos of k_cache and v_cache (each (capacity, C)), then q attends over rows [0, *pos].
// out (C). A position outside [0, capacity) writes a NaN row (the host checks it first).
void attention_decode(const float* qkv, float* k_cache, float* v_cache, const int32_t* pos,
                      float* out, int64_t C, int64_t NH, int64_t capacity, cudaStream_t stream);

// Backward (attention_backward.cu), fused per (batch, head): the probabilities are recomputed
// from q and k in shared memory (as the forward: scale, max subtracted, exp, times 1/sum), then
// dq, dk, dv; nothing of size (T, T) leaves the chip. qkv (B, T, 3C) the forward's input,
// dout (B, T, C) the gradient at the heads' output; dqkv (B, T, 3C) overwritten, every element
// written once (no atomics). A block holds q, k, v, g and two (T, T) tiles: T <= 64 with head
// size 16 takes 50 KiB (Error past the device's shared-memory limit).
void attention_backward(const float* dout, const float* qkv, float* dqkv, int64_t B, int64_t T,
                        int64_t C, int64_t NH, cudaStream_t stream);

}  // namespace minigpt::cuda
