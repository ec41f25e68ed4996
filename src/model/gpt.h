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

struct TrainState;  // saved activations of the last forward_train (defined in gpt.cpp)

class GrammarMiniGPT {
 public:
  // Checks every weight's shape against the config (Error naming the first mismatch).
  GrammarMiniGPT(ModelConfig config, ModelWeights weights);
  ~GrammarMiniGPT();
  GrammarMiniGPT(GrammarMiniGPT&&) noexcept;
  GrammarMiniGPT& operator=(GrammarMiniGPT&&) noexcept;

  const ModelConfig& config() const { return config_; }
  ModelWeights& weights() { return weights_; }
  const ModelWeights& weights() const { return weights_; }

  // Inference. ids (B, T) row-major, 1 <= T <= block_size, every id in [0, V) (Error
  // otherwise). Writes logits and probs (B, T, V), allocating them if undefined or misshapen.
  // B == 0 gives empty outputs. trace, if non-null, receives every layer's output (copies).
  // Scratch activations are allocated per call and freed on return (a few hundred KB at
  // (2, 16)); results depend only on the inputs and the pool's thread count.
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
  void backward(ModelWeights& grads, ThreadPool& pool);

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<TrainState> train_;
};

}  // namespace minigpt
