// Decoder: incremental (token-by-token) inference of one sequence with a KV cache.
//
// Feeding tokens one at a time (step) or a prompt at once (prefill) gives, at every position,
// the same logits as GrammarMiniGPT::forward over the whole prefix (tests hold it to 1e-5),
// while each step costs one row of every Linear plus attention over the cached keys/values.
// The cache holds block_size positions; feeding past that is an Error (no sliding window).
// What it does not do: batching several sequences, sampling (model/sampling.h).
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/gpt.h"

#include <cstdint>
#include <span>
#include <vector>

namespace minigpt {

class Decoder {
 public:
  // Keeps a reference to model: it must outlive the Decoder. Allocates the cache
  // (n_layer x 2 x (block_size, d) floats) once.
  explicit Decoder(const GrammarMiniGPT& model);

  // Forget every position; the next token is position 0.
  void reset();

  int64_t position() const { return pos_; }    // tokens fed so far
  int64_t capacity() const { return capacity_; }  // block_size

  // Feeds one token at position(); returns the logits (V) predicting the next token. The span
  // stays valid until the next step/prefill/reset. Error if id is outside [0, V) or the
  // context is full (position() == block_size); the state is unchanged on error.
  std::span<const float> step(int32_t id, ThreadPool& pool);

  // Feeds a prompt (every id checked, and the whole prompt checked to fit, before anything is
  // fed); returns the logits after its last token. An empty prompt is an Error.
  std::span<const float> prefill(std::span<const int32_t> ids, ThreadPool& pool);

 private:
  const GrammarMiniGPT* model_;
  int64_t capacity_;
  int64_t pos_ = 0;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer, (block_size, d)
  // one-row scratch
  Tensor x_, ln_, qkv_, att_out_, gelu_, logits_;
};

// Error unless a prompt of prompt_tokens (<bos> included) leaves room in a context of capacity
// positions for at least one generated token: the check `minigpt generate` and Python's
// Model.generate make before feeding anything, on every device.
void check_room_to_generate(int64_t prompt_tokens, int64_t capacity);

}  // namespace minigpt
