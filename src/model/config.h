// ModelConfig: the hyper-parameters of the grammar MiniGPT, as stored in a model file.
//
// Defaults are the shipped model's: 4 pre-LN blocks, 4 heads of 16 dims (d_model 64), context
// 64 tokens. vocab_size always comes from the file (the tokenizer's vocabulary).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

namespace minigpt {

struct ModelConfig {
  int n_layer = 4;
  int n_head = 4;
  int d_model = 64;
  int block_size = 64;  // longest sequence; position embeddings are (block_size, d_model)
  int vocab_size = 0;
  float layernorm_eps = 1e-5f;  // as nn.LayerNorm

  int head_dim() const { return d_model / n_head; }
  int d_ff() const { return 4 * d_model; }
  int64_t parameter_count() const;

  // Throws Error naming the bad field (non-positive sizes, d_model not divisible by n_head,
  // sizes past sanity caps that a malformed file could use to request huge allocations).
  void validate() const;

  nlohmann::json to_json() const;
  static ModelConfig from_json(const nlohmann::json& j);  // validates; unknown keys rejected
};

}  // namespace minigpt
