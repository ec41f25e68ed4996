// Whole-layer kernels of the grammar MiniGPT on the GPU, fp32, for the launch-bound sizes of
// inference (a few to a few hundred rows): a forward is 2 kernels per block plus 1 for the head
// (9 for the shipped model, against 23 with one kernel per op), a decode step the same 9. Each
// kernel keeps its rows' activations in shared memory between the ops it fuses; weights are read
// from global memory (L2-resident across calls). The CPU references are the per-op kernels of
// kernels/cpu (the model tests compare the whole forward and decode to the CPU engine).
//
//   attention_front  per (head, sequence): [embedding] + ln1 + the head's q, k, v rows of the qkv
//                    Linear + causal attention; k and v of the new rows go to a cache (the decode
//                    KV cache, or a (B, T, C) scratch in a forward); scores stay in shared memory.
//   proj_mlp         per 2 rows: x += proj(att); x += fc2(GELU(fc1(ln2(x)))).
//   lm_head_softmax  per 2 rows: logits = lm_head(ln_f(x)); probs = softmax(logits) (optional).
//
// proj_mlp and lm_head_softmax read their Linear weights transposed, (in, out) row-major, so a
// thread per output column reads consecutive addresses. Sums over k run in float in k order
// (the LayerNorm statistics in double, as the CPU). Launchers check their arguments and the
// launch error (minigpt::Error) and never synchronise; M == 0 or B == 0 launches nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

struct AttentionFront {
  const float* x = nullptr;      // (B, T, C) residual stream (ignored when ids is set)
  const int32_t* ids = nullptr;  // (B, T) or null: then x = wte[ids] + wpe[position] is computed
  const float* wte = nullptr;    // (V, C)       here and written to x_out by the head-0 blocks
  const float* wpe = nullptr;    // (P, C)
  float* x_out = nullptr;        // (B, T, C)
  const float* ln_weight = nullptr;
  const float* ln_bias = nullptr;  // (C)
  float ln_eps = 1e-5f;
  const float* qkv_weight = nullptr;  // (3C, C) as nn.Linear
  const float* qkv_bias = nullptr;    // (3C)
  float* k_cache = nullptr;  // (B, capacity, C): row p of sequence b holds position p's k
  float* v_cache = nullptr;  // (B, capacity, C)
  const int32_t* pos = nullptr;  // device scalar: the new rows are positions *pos + t; null: 0
  float* att = nullptr;          // (B, T, C) heads concatenated, before proj
};
// A position past capacity (or an id outside [0, V), a position outside [0, P)) gives NaN rows.
void attention_front(const AttentionFront& a, int64_t B, int64_t T, int64_t C, int64_t NH,
                     int64_t capacity, int64_t V, int64_t P, cudaStream_t stream);

struct ProjMlp {
  const float* att = nullptr;  // (M, C)
  float* x = nullptr;          // (M, C) residual stream, updated in place
  const float* proj_wt = nullptr;  // (C, C) proj.weight transposed
  const float* proj_bias = nullptr;
  const float* ln_weight = nullptr;
  const float* ln_bias = nullptr;
  float ln_eps = 1e-5f;
  const float* fc1_wt = nullptr;  // (C, F) fc1.weight transposed
  const float* fc1_bias = nullptr;
  const float* fc2_wt = nullptr;  // (F, C) fc2.weight transposed
  const float* fc2_bias = nullptr;
};
void proj_mlp(const ProjMlp& p, int64_t M, int64_t C, int64_t F, cudaStream_t stream);

// lm_wt (C, V) lm_head.weight transposed. probs may be null (the decoder needs only logits).
void lm_head_softmax(const float* x, const float* ln_weight, const float* ln_bias, float ln_eps,
                     const float* lm_wt, const float* lm_bias, float* logits, float* probs,
                     int64_t M, int64_t C, int64_t V, cudaStream_t stream);

// Shared memory attention_front needs (bytes); the caller checks it against the device's limit
// (gpt_layer_fits) before choosing these kernels.
size_t attention_front_smem(int64_t T, int64_t C, int64_t NH, int64_t capacity);
bool gpt_layer_fits(int64_t T, int64_t C, int64_t NH, int64_t F, int64_t capacity);

}  // namespace minigpt::cuda
