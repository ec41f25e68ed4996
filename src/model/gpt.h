// GrammarMiniGPT: the forward pass (inference and training), the backward pass, and the
// per-layer trace the reference tests compare against.
//
// Architecture (pre-LN GPT): x = wte[ids] + wpe[0..T); per block
//   x += proj(attention(ln1(x)));  x += fc2(gelu(fc1(ln2(x))));
// then logits = lm_head(ln_f(x)) (B, T, V) and probs = softmax(logits).
//
// This header is the contract between model/ (forward, backward), train/ (the optimiser
// loop) and the CLI; KV-cache decoding lives in model/decoder.h.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace minigpt {

// Intermediate outputs of one forward, for the layer-by-layer reference comparison:
// embed (B,T,d); blocks[i] = residual stream after block i (B,T,d); ln_f (B,T,d); logits.
struct ForwardTrace {
  Tensor embed;
  std::vector<Tensor> blocks;
  Tensor ln_f;
  Tensor logits;
};

struct TrainState;      // saved activations of the last forward_train (defined in gpt.cpp)
struct InferenceCache;  // packed Linear weights + reused forward scratch (defined in gpt.cpp)

class GrammarMiniGPT {
 public:
  // Checks every weight's shape against the config (Error naming the first mismatch).
  GrammarMiniGPT(ModelConfig config, ModelWeights weights);
  ~GrammarMiniGPT();
  GrammarMiniGPT(GrammarMiniGPT&&) noexcept;
  GrammarMiniGPT& operator=(GrammarMiniGPT&&) noexcept;

  const ModelConfig& config() const { return config_; }
  // Non-const access marks the inference cache (packed Linear weights) stale: the next
  // forward repacks from the current weights. So write weights through a reference obtained
  // after the last forward (as the trainer does: adamw.step(model.weights(), ...)); a
  // reference kept across a forward and written afterwards would leave the packing stale.
  ModelWeights& weights();
  const ModelWeights& weights() const { return weights_; }

  // Inference. ids (B, T) row-major, 1 <= T <= block_size, every id in [0, V) (Error
  // otherwise). Writes logits and probs (B, T, V), allocating them if undefined or misshapen.
  // B == 0 gives empty outputs. trace, if non-null, receives every layer's output (copies).
  // The Linear weights are packed once (first forward after construction or after a
  // non-const weights()) and scratch activations are kept for the last (B, T), so a steady
  // stream of same-shaped calls allocates nothing; concurrent calls on one model serialise
  // on a mutex. Results depend only on the inputs and the pool's thread count (bitwise the
  // same as without the cache).
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs,
               ThreadPool& pool, ForwardTrace* trace = nullptr) const;

  // Training forward: saves the activations the backward needs and returns the mean
  // cross-entropy over targets (B, T) != -1. targets are -1 (ignored) or in [0, V) (Error
  // otherwise); B >= 1. The saved state (about (16 d L + 2 V) * B*T floats plus the attention
  // probabilities) is allocated on the first call for a (B, T) and reused while (B, T) stays
  // the same, so a training loop allocates nothing per step.
  float forward_train(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                      ThreadPool& pool);
  // Backward of the last forward_train: accumulates d(loss)/d(param) into grads, which the
  // caller zeroes (ModelWeights::zeros_like) between steps.
  // on_ready, if set, is called as soon as a group of gradients is final, in this order:
  // kHeadStage (ln_f.*, lm_head.*), then block n_layer-1 ... 0 (that block's 12 tensors),
  // then kEmbeddingStage (wte, wpe). Data-parallel training starts each group's all-reduce
  // there, overlapping it with the rest of the backward (dist/grad_buckets.h).
  static constexpr int kHeadStage = -2;
  static constexpr int kEmbeddingStage = -1;
  void backward(ModelWeights& grads, ThreadPool& pool,
                const std::function<void(int stage)>& on_ready = {});

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<TrainState> train_;
  std::unique_ptr<InferenceCache> infer_;  // never null (allocated by the constructor)
};

}  // namespace minigpt
