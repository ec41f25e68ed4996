#include "model/weights.h"

#include "core/error.h"

#include <cmath>
#include <random>

namespace minigpt {

std::vector<std::pair<std::string, Shape>> expected_parameters(const ModelConfig& c) {
  const int64_t d = c.d_model, V = c.vocab_size, F = c.d_ff();
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {V, d}}, {"wpe.weight", {c.block_size, d}}};
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    out.insert(out.end(), {{p + "ln1.weight", {d}},           {p + "ln1.bias", {d}},
                           {p + "attn.qkv.weight", {3 * d, d}}, {p + "attn.qkv.bias", {3 * d}},
                           {p + "attn.proj.weight", {d, d}},  {p + "attn.proj.bias", {d}},
                           {p + "ln2.weight", {d}},           {p + "ln2.bias", {d}},
                           {p + "mlp.fc1.weight", {F, d}},    {p + "mlp.fc1.bias", {F}},
                           {p + "mlp.fc2.weight", {d, F}},    {p + "mlp.fc2.bias", {d}}});
  }
  out.insert(out.end(), {{"ln_f.weight", {d}}, {"ln_f.bias", {d}},
                         {"lm_head.weight", {V, d}}, {"lm_head.bias", {V}}});
  return out;
}

template <typename W, typename T>
static std::vector<std::pair<std::string, T*>> named_impl(W& w) {
  std::vector<std::pair<std::string, T*>> out = {{"wte.weight", &w.wte}, {"wpe.weight", &w.wpe}};
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    auto& b = w.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    out.insert(out.end(), {{p + "ln1.weight", &b.ln1_weight},       {p + "ln1.bias", &b.ln1_bias},
                           {p + "attn.qkv.weight", &b.qkv_weight},   {p + "attn.qkv.bias", &b.qkv_bias},
                           {p + "attn.proj.weight", &b.proj_weight}, {p + "attn.proj.bias", &b.proj_bias},
                           {p + "ln2.weight", &b.ln2_weight},       {p + "ln2.bias", &b.ln2_bias},
                           {p + "mlp.fc1.weight", &b.fc1_weight},   {p + "mlp.fc1.bias", &b.fc1_bias},
                           {p + "mlp.fc2.weight", &b.fc2_weight},   {p + "mlp.fc2.bias", &b.fc2_bias}});
  }
  out.insert(out.end(), {{"ln_f.weight", &w.ln_f_weight}, {"ln_f.bias", &w.ln_f_bias},
                         {"lm_head.weight", &w.lm_head_weight}, {"lm_head.bias", &w.lm_head_bias}});
  return out;
}

std::vector<std::pair<std::string, Tensor*>> ModelWeights::named() {
  return named_impl<ModelWeights, Tensor>(*this);
}
std::vector<std::pair<std::string, const Tensor*>> ModelWeights::named() const {
  return named_impl<const ModelWeights, const Tensor>(*this);
}

ModelWeights ModelWeights::allocate(const ModelConfig& config) {
  config.validate();
  ModelWeights w;
  w.blocks.resize(static_cast<size_t>(config.n_layer));
  const auto shapes = expected_parameters(config);
  auto slots = w.named();
  for (size_t i = 0; i < slots.size(); ++i) *slots[i].second = Tensor::empty(shapes[i].second);
  return w;
}

ModelWeights ModelWeights::zeros_like(const ModelConfig& config) {
  ModelWeights w = allocate(config);
  for (auto& [name, t] : w.named()) t->fill(0.0f);
  return w;
}

ModelWeights ModelWeights::clone() const {
  ModelWeights out = *this;  // copies the handles, then gives each its own storage
  for (auto& [name, t] : out.named()) *t = t->clone();
  return out;
}

ModelWeights ModelWeights::init_random(const ModelConfig& config, uint64_t seed) {
  ModelWeights w = allocate(config);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  for (auto& [name, t] : w.named()) {
    const bool is_ln = name.find("ln") != std::string::npos && name.find("lm_head") == std::string::npos;
    const bool is_bias = name.ends_with(".bias");
    if (is_bias) t->fill(0.0f);
    else if (is_ln) t->fill(1.0f);
    else {
      const bool residual = name.ends_with("attn.proj.weight") || name.ends_with("mlp.fc2.weight");
      for (float& x : t->span()) x = normal(rng) * (residual ? residual_scale : 1.0f);
    }
  }
  return w;
}

void check_weights(const ModelWeights& weights, const ModelConfig& config) {
  MINIGPT_CHECK(static_cast<int>(weights.blocks.size()) == config.n_layer,
                "model has {} blocks, config says n_layer = {}", weights.blocks.size(), config.n_layer);
  const auto shapes = expected_parameters(config);
  const auto slots = weights.named();
  for (size_t i = 0; i < slots.size(); ++i) check_shape(*slots[i].second, shapes[i].second, slots[i].first);
}

}  // namespace minigpt
