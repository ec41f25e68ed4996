// AdamW (Loshchilov & Hutter 2019: Adam with decoupled weight decay) over every parameter of
// GrammarMiniGPT, and the global-norm gradient clipping that precedes it.
//
// Update of one element at step t (1-based), exactly as torch.optim.AdamW:
//   p *= 1 - lr * wd                       (decoupled decay; wd = 0 for non-decayed tensors)
//   m  = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
// Which tensors decay (as GPT-2 / nanoGPT): every tensor of rank >= 2, that is wte, wpe, every
// Linear weight and lm_head.weight. Biases and LayerNorm gains and biases (rank 1) never
// decay: shrinking a gain towards 0 or a bias towards 0 is not a regulariser of capacity.
//
// The moments m, v live in two ModelWeights of the model's layout, so a checkpoint stores them
// under the parameter names. Elementwise and therefore independent of the thread count.
#pragma once

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

#include <cstdint>
#include <string>

namespace minigpt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  void validate() const;  // Error naming the bad field
};

// One AdamW step on n floats. t >= 1 is the step count after this update (bias correction).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float wd,
                  const AdamWConfig& config, int64_t t);

class AdamW {
 public:
  AdamW(const ModelConfig& model, AdamWConfig config);

  // True for the tensors that take weight decay (rank >= 2, see above).
  static bool decays(const Tensor& parameter);
  static bool decays(const Shape& shape) { return shape.size() >= 2; }

  // One update of every parameter with the gradients `grads` (same layout) at learning rate lr.
  void step(ModelWeights& params, const ModelWeights& grads, float lr, ThreadPool& pool);

  const AdamWConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }  // updates done so far
  ModelWeights& m() { return m_; }
  ModelWeights& v() { return v_; }
  const ModelWeights& m() const { return m_; }
  const ModelWeights& v() const { return v_; }
  // Restores a checkpoint's state; the moments must have the model's layout (Error otherwise).
  void restore(int64_t steps, ModelWeights m, ModelWeights v);

 private:
  ModelConfig model_;
  AdamWConfig config_;
  ModelWeights m_, v_;
  int64_t steps_ = 0;
};

// The L2 norm of every gradient element together, summed in double in canonical tensor order
// (each tensor in 16 lanes reduced in a fixed order with AVX-512), on the calling thread: the
// same bits for any thread count.
double global_grad_norm(const ModelWeights& grads);

// Scales every gradient by max_norm / (norm + 1e-6) when norm > max_norm (as
// torch.nn.utils.clip_grad_norm_). Returns the norm before clipping. max_norm <= 0 disables
// clipping (the norm is still returned). A non-finite norm is an Error: training diverged.
double clip_grad_norm(ModelWeights& grads, double max_norm);

}  // namespace minigpt
