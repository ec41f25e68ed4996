// Decoder: one-token steps through every block, appending this position's k and v to the
// per-layer cache and attending over rows [0, pos] of it (kernels/cpu/attention.h).
#include "model/decoder.h"

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"

#include <algorithm>

namespace minigpt {

Decoder::Decoder(const GrammarMiniGPT& model)
    : model_(&model), capacity_(model.config().block_size) {
  const ModelConfig& c = model.config();
  const int64_t d = c.d_model, F = c.d_ff();
  for (int l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(Tensor::zeros({capacity_, d}));
    v_cache_.push_back(Tensor::zeros({capacity_, d}));
  }
  x_ = Tensor::empty({1, d});
  ln_ = Tensor::empty({1, d});
  qkv_ = Tensor::empty({1, 3 * d});
  att_out_ = Tensor::empty({1, d});
  gelu_ = Tensor::empty({1, F});
  logits_ = Tensor::empty({1, static_cast<int64_t>(c.vocab_size)});
}

void Decoder::reset() { pos_ = 0; }

std::span<const float> Decoder::step(int32_t id, ThreadPool& pool) {
  const ModelConfig& c = model_->config();
  const ModelWeights& w = model_->weights();
  const int64_t d = c.d_model, F = c.d_ff(), V = c.vocab_size, t = pos_;
  const float eps = c.layernorm_eps;
  MINIGPT_CHECK(id >= 0 && id < V, "token id {} is outside the vocabulary [0, {})", id, V);
  MINIGPT_CHECK(t < capacity_,
                "the context is full: the model's block_size is {} tokens and {} were fed",
                capacity_, t);

  // x (d) = wte[id] + wpe[t]
  float* x = x_.data();
  const float* te = w.wte.data() + static_cast<int64_t>(id) * d;
  const float* pe = w.wpe.data() + t * d;
  for (int64_t i = 0; i < d; ++i) x[i] = te[i] + pe[i];

  for (int l = 0; l < c.n_layer; ++l) {
    const BlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    float* kc = k_cache_[static_cast<size_t>(l)].data();
    float* vc = v_cache_[static_cast<size_t>(l)].data();
    cpu::layernorm_forward(x, bw.ln1_weight.data(), bw.ln1_bias.data(), ln_.data(), nullptr,
                           nullptr, 1, d, eps, pool);
    cpu::linear_forward(ln_.data(), bw.qkv_weight.data(), bw.qkv_bias.data(), qkv_.data(), 1, d,
                        3 * d, pool);
    // qkv (3d) = [q | k | v]: k and v become cache row t
    const float* qkv = qkv_.data();
    std::copy(qkv + d, qkv + 2 * d, kc + t * d);
    std::copy(qkv + 2 * d, qkv + 3 * d, vc + t * d);
    cpu::attention_decode_step(qkv, kc, vc, att_out_.data(), t, d, c.n_head);
    cpu::linear_forward(att_out_.data(), bw.proj_weight.data(), bw.proj_bias.data(), x, 1, d, d,
                        pool, {.residual = x});  // x += proj(att_out)
    cpu::layernorm_forward(x, bw.ln2_weight.data(), bw.ln2_bias.data(), ln_.data(), nullptr,
                           nullptr, 1, d, eps, pool);
    cpu::linear_forward(ln_.data(), bw.fc1_weight.data(), bw.fc1_bias.data(), gelu_.data(), 1, d,
                        F, pool, {.gelu = true});
    cpu::linear_forward(gelu_.data(), bw.fc2_weight.data(), bw.fc2_bias.data(), x, 1, F, d, pool,
                        {.residual = x});  // x += fc2(gelu)
  }
  cpu::layernorm_forward(x, w.ln_f_weight.data(), w.ln_f_bias.data(), ln_.data(), nullptr,
                         nullptr, 1, d, eps, pool);
  cpu::linear_forward(ln_.data(), w.lm_head_weight.data(), w.lm_head_bias.data(), logits_.data(),
                      1, d, V, pool);
  ++pos_;
  return {logits_.data(), static_cast<size_t>(V)};
}

std::span<const float> Decoder::prefill(std::span<const int32_t> ids, ThreadPool& pool) {
  const int64_t V = model_->config().vocab_size;
  MINIGPT_CHECK(!ids.empty(), "prefill needs at least one token");
  MINIGPT_CHECK(pos_ + static_cast<int64_t>(ids.size()) <= capacity_,
                "the prompt of {} tokens does not fit: {} of the model's {} context positions "
                "are left",
                ids.size(), capacity_ - pos_, capacity_);
  for (size_t i = 0; i < ids.size(); ++i) {
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < V,
                  "token id {} at prompt position {} is outside the vocabulary [0, {})", ids[i],
                  i, V);
  }
  std::span<const float> logits;
  for (int32_t id : ids) logits = step(id, pool);
  return logits;
}

void check_room_to_generate(int64_t prompt_tokens, int64_t capacity) {
  MINIGPT_CHECK(prompt_tokens < capacity,
                "the prompt has {} tokens with <bos>; the model's context holds {}, leaving no room to generate",
                prompt_tokens, capacity);
}

}  // namespace minigpt
