// Causal multi-head self-attention core on the CPU (the part between the qkv and proj
// Linears), its backward, and the one-token decode step against a KV cache.
//
// Layout: qkv (B, T, 3C) as produced by the qkv Linear: [q | k | v] along the last dim, head
// h at columns [h*dh, (h+1)*dh) of each part. out (B, T, C) with heads concatenated.
// att (B, NH, T, T) holds the softmax probabilities (saved for the backward; only the lower
// triangle t2 <= t1 is meaningful, masked entries are written as 0). Scale 1/sqrt(dh).
// Masked positions are skipped, never filled with a magic -1e4 sentinel.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

void attention_forward(const float* qkv, float* out, float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, ThreadPool& pool);

// dqkv (B, T, 3C) overwritten. Needs the forward's qkv and att.
void attention_backward(const float* dout, const float* qkv, const float* att, float* dqkv,
                        int64_t B, int64_t T, int64_t C, int64_t NH, ThreadPool& pool);

// One new position `t` (0-based) of one sequence: q (C) attends to k_cache, v_cache rows
// [0, t] (each row C floats, already holding this position's k and v). out (C).
void attention_decode_step(const float* q, const float* k_cache, const float* v_cache,
                           float* out, int64_t t, int64_t C, int64_t NH);

}  // namespace minigpt::cpu
