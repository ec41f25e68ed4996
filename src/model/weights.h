// ModelWeights: every parameter tensor of GrammarMiniGPT, named as the PyTorch port's
// state_dict (docs/ARCHITECTURE.md), with the shapes the config implies.
//
// Linear weights are (out, in) as nn.Linear. qkv.weight is (3d, d): rows [0, d) produce q,
// [d, 2d) k, [2d, 3d) v, and within each, head h owns rows [h*dh, (h+1)*dh).
#pragma once

#include "core/tensor.h"
#include "model/config.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace minigpt {

struct BlockWeights {
  Tensor ln1_weight, ln1_bias;    // (d)
  Tensor qkv_weight, qkv_bias;    // (3d, d), (3d)
  Tensor proj_weight, proj_bias;  // (d, d), (d)
  Tensor ln2_weight, ln2_bias;    // (d)
  Tensor fc1_weight, fc1_bias;    // (4d, d), (4d)
  Tensor fc2_weight, fc2_bias;    // (d, 4d), (d)
};

struct ModelWeights {
  Tensor wte;                         // (V, d) token embeddings
  Tensor wpe;                         // (block_size, d) position embeddings
  std::vector<BlockWeights> blocks;   // n_layer
  Tensor ln_f_weight, ln_f_bias;      // (d)
  Tensor lm_head_weight;              // (V, d)
  Tensor lm_head_bias;                // (V)

  // Allocates every tensor with its shape (contents uninitialised).
  static ModelWeights allocate(const ModelConfig& config);
  // Same layout, all zeros (gradients, optimizer moments).
  static ModelWeights zeros_like(const ModelConfig& config);
  // A deep copy (new storage, same values): checkpoints and snapshots of live weights.
  ModelWeights clone() const;
  // GPT-2 style initialisation, deterministic for a seed: normal(0, 0.02) weights, zero biases,
  // unit LayerNorm gains; proj and fc2 scaled by 1/sqrt(2 * n_layer) (residual projections).
  static ModelWeights init_random(const ModelConfig& config, uint64_t seed);

  // (name, tensor) in the canonical order: wte, wpe, blocks.0.*, ..., ln_f.*, lm_head.*.
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
};

// The canonical (name, shape) list a config implies, in the order of ModelWeights::named().
std::vector<std::pair<std::string, Shape>> expected_parameters(const ModelConfig& config);

// Throws Error naming the first tensor whose shape disagrees with the config.
void check_weights(const ModelWeights& weights, const ModelConfig& config);

}  // namespace minigpt
