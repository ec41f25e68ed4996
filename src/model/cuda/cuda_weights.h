// CudaWeights: a GrammarMiniGPT's parameters on the GPU, every tensor a slot of one CudaArena,
// laid out as on the CPU (Linear weights (out, in) as nn.Linear; model/weights.h), so the same
// pointers feed our kernels and cuBLAS. upload/download copy every tensor in the canonical order
// of ModelWeights::named(); the training step keeps its gradients and AdamW moments in the same
// layout (a second and third CudaWeights carved from its arena).
//
// What it does not do: own memory (the arena does), check values, or synchronise beyond what
// upload/download say.
#pragma once

#include "core/cuda_arena.h"
#include "model/config.h"
#include "model/weights.h"

#include <string>
#include <utility>
#include <vector>

namespace minigpt {

struct CudaBlockWeights {
  float *ln1_weight, *ln1_bias;    // (d)
  float *qkv_weight, *qkv_bias;    // (3d, d), (3d)
  float *proj_weight, *proj_bias;  // (d, d), (d)
  float *ln2_weight, *ln2_bias;    // (d)
  float *fc1_weight, *fc1_bias;    // (4d, d), (4d)
  float *fc2_weight, *fc2_bias;    // (d, 4d), (d)
};

struct CudaWeights {
  float* wte = nullptr;  // (V, d)
  float* wpe = nullptr;  // (block_size, d)
  std::vector<CudaBlockWeights> blocks;
  float *ln_f_weight = nullptr, *ln_f_bias = nullptr;  // (d)
  float *lm_head_weight = nullptr, *lm_head_bias = nullptr;  // (V, d), (V)

  // Slots for every tensor of `config` carved from arena (uninitialised), named like the
  // PyTorch state_dict with `prefix` in front ("grad." for gradients).
  static CudaWeights allocate(const ModelConfig& config, CudaArena& arena,
                              const std::string& prefix = "");
  // Bytes allocate() takes from an arena (alignment included): for sizing the arena first.
  static size_t arena_bytes(const ModelConfig& config);

  // (name, device pointer) in the order of ModelWeights::named().
  std::vector<std::pair<std::string, float*>> named(const ModelConfig& config) const;
};

// Copies every tensor host -> device (synchronous: returns when the copies are done). Error
// naming the first tensor whose shape disagrees with config.
void upload_weights(const ModelWeights& host, const ModelConfig& config, const CudaWeights& device);
// Copies every tensor device -> host into host's tensors (allocated with the config's shapes).
void download_weights(const CudaWeights& device, const ModelConfig& config, ModelWeights& host);

}  // namespace minigpt
