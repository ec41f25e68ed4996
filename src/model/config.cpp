#include "model/config.h"

#include "core/error.h"

namespace minigpt {

int64_t ModelConfig::parameter_count() const {
  const int64_t d = d_model, V = vocab_size, T = block_size, F = d_ff();
  const int64_t per_block = 2 * d                 // ln1
                            + 3 * d * d + 3 * d   // qkv
                            + d * d + d           // proj
                            + 2 * d               // ln2
                            + F * d + F           // fc1
                            + d * F + d;          // fc2
  return V * d + T * d + n_layer * per_block + 2 * d + V * d + V;
}

void ModelConfig::validate() const {
  // Caps keep a hostile file from asking for absurd allocations; they are far above anything
  // this project trains.
  MINIGPT_CHECK(n_layer >= 1 && n_layer <= 64, "config: n_layer must be in [1, 64], got {}", n_layer);
  MINIGPT_CHECK(n_head >= 1 && n_head <= 64, "config: n_head must be in [1, 64], got {}", n_head);
  MINIGPT_CHECK(d_model >= 1 && d_model <= 4096, "config: d_model must be in [1, 4096], got {}", d_model);
  MINIGPT_CHECK(d_model % n_head == 0, "config: d_model {} is not divisible by n_head {}", d_model, n_head);
  MINIGPT_CHECK(block_size >= 1 && block_size <= 8192, "config: block_size must be in [1, 8192], got {}", block_size);
  MINIGPT_CHECK(vocab_size >= 1 && vocab_size <= 1000000, "config: vocab_size must be in [1, 1000000], got {}", vocab_size);
  MINIGPT_CHECK(layernorm_eps > 0.0f && layernorm_eps < 1.0f, "config: layernorm_eps must be in (0, 1), got {}", layernorm_eps);
}

nlohmann::json ModelConfig::to_json() const {
  return {{"n_layer", n_layer},       {"n_head", n_head},         {"d_model", d_model},
          {"block_size", block_size}, {"vocab_size", vocab_size}, {"layernorm_eps", layernorm_eps}};
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  MINIGPT_CHECK(j.is_object(), "config: expected a JSON object");
  ModelConfig c;
  for (const auto& [key, value] : j.items()) {
    if (key == "layernorm_eps") {
      MINIGPT_CHECK(value.is_number(), "config: layernorm_eps must be a number");
      const double eps = value.get<double>();  // range-check before narrowing to float
      MINIGPT_CHECK(eps > 0.0 && eps < 1.0, "config: layernorm_eps must be in (0, 1), got {}", eps);
      c.layernorm_eps = static_cast<float>(eps);
      continue;
    }
    MINIGPT_CHECK(value.is_number_integer(), "config: '{}' must be an integer", key);
    const int64_t v = value.get<int64_t>();
    MINIGPT_CHECK(v >= INT32_MIN && v <= INT32_MAX, "config: '{}' = {} is out of range", key, v);
    if (key == "n_layer") c.n_layer = static_cast<int>(v);
    else if (key == "n_head") c.n_head = static_cast<int>(v);
    else if (key == "d_model") c.d_model = static_cast<int>(v);
    else if (key == "block_size") c.block_size = static_cast<int>(v);
    else if (key == "vocab_size") c.vocab_size = static_cast<int>(v);
    else MINIGPT_FAIL("config: unknown key '{}'", key);
  }
  c.validate();
  return c;
}

}  // namespace minigpt
