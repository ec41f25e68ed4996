#include "train/checkpoint.h"

#include "core/error.h"
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>

namespace minigpt {

namespace {

constexpr const char* kFormat = "minigpt-checkpoint";
constexpr const char* kMomentM = "adamw.m.";
constexpr const char* kMomentV = "adamw.v.";

uint64_t parse_u64(const std::map<std::string, std::string>& meta, const std::string& key,
                   const std::string& path) {
  const auto it = meta.find(key);
  MINIGPT_CHECK(it != meta.end(), "checkpoint '{}': metadata lacks '{}'", path, key);
  const std::string& s = it->second;
  MINIGPT_CHECK(!s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos,
                "checkpoint '{}': '{}' is not a decimal integer: '{}'", path, key, s);
  try {
    return std::stoull(s);
  } catch (const std::out_of_range&) {
    MINIGPT_FAIL("checkpoint '{}': '{}' = {} does not fit in 64 bits", path, key, s);
  }
}

const std::string& meta_at(const std::map<std::string, std::string>& meta, const std::string& key,
                           const std::string& path) {
  const auto it = meta.find(key);
  MINIGPT_CHECK(it != meta.end(), "checkpoint '{}': metadata lacks '{}'", path, key);
  return it->second;
}

nlohmann::json parse_json(const std::string& text, const std::string& key, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MINIGPT_FAIL("checkpoint '{}': metadata '{}' is not valid JSON: {}", path, key, e.what());
  }
}

// Fills `weights` (allocated for the config) from tensors "<prefix><name>".
void read_weights(const io::SafetensorsFile& file, const std::string& prefix, ModelWeights& weights) {
  for (auto& [name, slot] : weights.named()) {
    const std::string key = prefix + name;
    MINIGPT_CHECK(file.index.find(key) != nullptr, "checkpoint '{}': tensor '{}' is missing",
                  file.path, key);
    Tensor t = file.tensor_f32(key);
    MINIGPT_CHECK(t.shape() == slot->shape(), "checkpoint '{}': tensor '{}' is {}, the config implies {}",
                  file.path, key, shape_str(t.shape()), shape_str(slot->shape()));
    *slot = std::move(t);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainCheckpoint& c) {
  const ModelConfig& config = c.options.model;
  check_weights(c.weights, config);
  check_weights(c.adam_m, config);
  check_weights(c.adam_v, config);
  MINIGPT_CHECK(static_cast<int>(c.vocab.size()) == config.vocab_size,
                "checkpoint: vocabulary has {} tokens, config says {}", c.vocab.size(), config.vocab_size);
  std::vector<io::SafetensorsItem> items;
  for (const auto& [name, t] : c.weights.named()) items.push_back(io::f32_item(name, *t));
  for (const auto& [name, t] : c.adam_m.named()) items.push_back(io::f32_item(kMomentM + name, *t));
  for (const auto& [name, t] : c.adam_v.named()) items.push_back(io::f32_item(kMomentV + name, *t));
  const std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"config", config.to_json().dump()},
      {"vocab", nlohmann::json(c.vocab).dump()},
      {"options", c.options.to_json().dump()},
      {"step", std::to_string(c.step)},
      {"rng_state", std::to_string(c.rng_state)},
      {"windows_drawn", std::to_string(c.windows_drawn)},
      {"train_fingerprint", std::to_string(c.train_fingerprint)},
      {"world_size", std::to_string(c.world_size)},
  };
  io::write_safetensors(path, items, meta);
}

TrainCheckpoint load_checkpoint(const std::string& path) {
  const io::SafetensorsFile file = io::read_safetensors(path);
  const auto& meta = file.index.metadata;
  const auto format = meta.find("format");
  MINIGPT_CHECK(format != meta.end() && format->second == kFormat,
                "'{}' is not a minigpt training checkpoint (metadata format is '{}')", path,
                format == meta.end() ? std::string("absent") : format->second);

  TrainCheckpoint c;
  c.options = TrainOptions::from_json(parse_json(meta_at(meta, "options", path), "options", path));
  const ModelConfig config = ModelConfig::from_json(parse_json(meta_at(meta, "config", path), "config", path));
  MINIGPT_CHECK(config.to_json() == c.options.model.to_json(),
                "checkpoint '{}': 'config' and the options' model disagree", path);
  const nlohmann::json vocab = parse_json(meta_at(meta, "vocab", path), "vocab", path);
  MINIGPT_CHECK(vocab.is_array() && static_cast<int>(vocab.size()) == config.vocab_size,
                "checkpoint '{}': vocab must be an array of {} tokens", path, config.vocab_size);
  for (const auto& token : vocab) {
    MINIGPT_CHECK(token.is_string(), "checkpoint '{}': a vocab entry is not a string", path);
    c.vocab.push_back(token.get<std::string>());
  }

  // Exactly the expected tensors: 3 per parameter, nothing else.
  const size_t n_params = expected_parameters(config).size();
  MINIGPT_CHECK(file.index.entries.size() == 3 * n_params,
                "checkpoint '{}': {} tensors, expected {} (weights and two AdamW moments)", path,
                file.index.entries.size(), 3 * n_params);
  c.weights = ModelWeights::allocate(config);
  c.adam_m = ModelWeights::allocate(config);
  c.adam_v = ModelWeights::allocate(config);
  read_weights(file, "", c.weights);
  read_weights(file, kMomentM, c.adam_m);
  read_weights(file, kMomentV, c.adam_v);

  const uint64_t step = parse_u64(meta, "step", path);
  MINIGPT_CHECK(step <= static_cast<uint64_t>(c.options.steps),
                "checkpoint '{}': step {} is past the run's {} steps", path, step, c.options.steps);
  c.step = static_cast<int64_t>(step);
  c.rng_state = parse_u64(meta, "rng_state", path);
  c.windows_drawn = parse_u64(meta, "windows_drawn", path);
  c.train_fingerprint = parse_u64(meta, "train_fingerprint", path);
  if (meta.count("world_size")) {
    const uint64_t world = parse_u64(meta, "world_size", path);
    MINIGPT_CHECK(world >= 1 && world <= 1'000'000, "checkpoint '{}': world_size {} is out of range", path, world);
    c.world_size = static_cast<int>(world);
  }
  return c;
}

}  // namespace minigpt
