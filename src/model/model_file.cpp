// load_model / save_model: the model file formats of model_file.h on top of io/.
//
// The io layer validates the container (safetensors header, zip, npy); this file validates the
// meaning: format tag, config, vocabulary, and exactly the expected tensors with the expected
// shapes and dtype F32. Every Error starts with the file's path.
#include "model/model_file.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_strict.h"
#include "io/npy.h"
#include "io/npz.h"
#include "io/safetensors.h"

#include <cstring>
#include <map>
#include <set>

namespace minigpt {

namespace {

using json = nlohmann::json;

constexpr const char* kFormatTag = "minigpt";
constexpr const char* kNpzMetadata = "__metadata__.npy";

enum class Format { Safetensors, Npz };

Format format_of(const std::string& path) {
  if (path.ends_with(".safetensors")) return Format::Safetensors;
  if (path.ends_with(".npz")) return Format::Npz;
  MINIGPT_FAIL("{}: unknown model file extension (expected .safetensors or .npz)", path);
}

// Runs f, prefixing any Error from it with the path (config/vocab checks do not know the file).
template <typename F>
auto with_path(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.starts_with(path + ":")) throw;
    MINIGPT_FAIL("{}: {}", path, msg);
  }
}

ModelConfig parse_config(const json& j, const std::string& path) {
  return with_path(path, [&] { return ModelConfig::from_json(j); });
}

std::vector<std::string> parse_vocab(const json& j, const ModelConfig& config, const std::string& path) {
  MINIGPT_CHECK(j.is_array(), "{}: metadata vocab must be a JSON array of strings", path);
  MINIGPT_CHECK(j.size() == static_cast<size_t>(config.vocab_size), "{}: metadata vocab has {} tokens, config vocab_size is {}",
                path, j.size(), config.vocab_size);
  std::vector<std::string> vocab;
  vocab.reserve(j.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    MINIGPT_CHECK(j[i].is_string(), "{}: metadata vocab entry {} is not a string", path, i);
    std::string token = j[i].get<std::string>();
    MINIGPT_CHECK(!token.empty(), "{}: metadata vocab entry {} is empty", path, i);
    MINIGPT_CHECK(seen.insert(token).second, "{}: metadata vocab entry {} duplicates token '{}'", path, i, token);
    vocab.push_back(std::move(token));
  }
  return vocab;
}

void check_vocab_for_save(const ModelFile& model, const std::string& path) {
  MINIGPT_CHECK(model.vocab.size() == static_cast<size_t>(model.config.vocab_size),
                "{}: cannot save: vocab has {} tokens, config vocab_size is {}", path, model.vocab.size(),
                model.config.vocab_size);
  std::set<std::string> seen;
  for (size_t i = 0; i < model.vocab.size(); ++i) {
    MINIGPT_CHECK(!model.vocab[i].empty(), "{}: cannot save: vocab entry {} is empty", path, i);
    MINIGPT_CHECK(seen.insert(model.vocab[i]).second, "{}: cannot save: vocab entry {} duplicates '{}'", path, i, model.vocab[i]);
  }
}

// Fills model.weights from (name -> tensor) after checking the set of names and every shape.
void assign_weights(ModelFile& model, std::map<std::string, Tensor>& found, const std::string& path) {
  const auto expected = expected_parameters(model.config);
  std::set<std::string> expected_names;
  for (const auto& [name, shape] : expected) expected_names.insert(name);
  for (const auto& [name, t] : found)
    MINIGPT_CHECK(expected_names.count(name), "{}: unexpected tensor '{}' (not a parameter of this config)", path, name);
  model.weights = ModelWeights{};
  model.weights.blocks.resize(static_cast<size_t>(model.config.n_layer));
  auto slots = model.weights.named();
  MINIGPT_CHECK(slots.size() == expected.size(), "{}: internal: parameter list mismatch", path);
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, shape] = expected[i];
    auto it = found.find(name);
    MINIGPT_CHECK(it != found.end(), "{}: missing tensor '{}'", path, name);
    MINIGPT_CHECK(it->second.shape() == shape, "{}: tensor '{}' has shape {}, the config needs {}", path, name,
                  shape_str(it->second.shape()), shape_str(shape));
    *slots[i].second = std::move(it->second);
  }
}

ModelFile load_safetensors(const std::string& path) {
  const io::SafetensorsFile file = io::read_safetensors(path);
  const auto& meta = file.index.metadata;
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    MINIGPT_CHECK(it != meta.end(), "{}: __metadata__ has no '{}' (not a minigpt model file?)", path, key);
    return it->second;
  };
  MINIGPT_CHECK(get("format") == kFormatTag, "{}: __metadata__ format is '{}', expected '{}'", path, get("format"), kFormatTag);
  ModelFile model;
  model.config = parse_config(io::parse_json_strict(get("config"), path, "metadata config"), path);
  model.vocab = parse_vocab(io::parse_json_strict(get("vocab"), path, "metadata vocab"), model.config, path);

  std::map<std::string, Tensor> found;
  for (const auto& e : file.index.entries) {
    MINIGPT_CHECK(e.dtype == io::DType::F32, "{}: tensor '{}' has dtype {}, expected F32", path, e.name, io::dtype_name(e.dtype));
    found[e.name] = file.tensor_f32(e.name);
  }
  assign_weights(model, found, path);
  return model;
}

ModelFile load_npz(const std::string& path) {
  auto members = io::read_npz(path);
  const io::NpzMember* meta_member = nullptr;
  for (const auto& m : members)
    if (m.name == kNpzMetadata) meta_member = &m;
  MINIGPT_CHECK(meta_member != nullptr, "{}: no {} member (not a minigpt model file?)", path, kNpzMetadata);
  Shape meta_shape;
  const auto meta_bytes = io::npy_to_u8(meta_member->bytes, path + ": " + kNpzMetadata, &meta_shape);
  MINIGPT_CHECK(meta_shape.size() == 1, "{}: {} must be a 1-D uint8 array, got shape {}", path, kNpzMetadata,
                shape_str(meta_shape));
  const json meta = io::parse_json_strict(
      std::string_view(reinterpret_cast<const char*>(meta_bytes.data()), meta_bytes.size()), path, "metadata");
  MINIGPT_CHECK(meta.is_object() && meta.contains("config") && meta.contains("vocab"),
                "{}: metadata must be a JSON object with 'config' and 'vocab'", path);
  for (const auto& [key, value] : meta.items())
    MINIGPT_CHECK(key == "config" || key == "vocab" || key == "format", "{}: metadata has unknown key '{}'", path, key);
  if (meta.contains("format"))
    MINIGPT_CHECK(meta["format"] == kFormatTag, "{}: metadata format is {}, expected '{}'", path,
                  meta["format"].dump(-1, ' ', false, json::error_handler_t::replace), kFormatTag);
  ModelFile model;
  model.config = parse_config(meta["config"], path);
  model.vocab = parse_vocab(meta["vocab"], model.config, path);

  std::map<std::string, Tensor> found;
  for (const auto& m : members) {
    if (&m == meta_member) continue;
    MINIGPT_CHECK(m.name.ends_with(".npy"), "{}: member '{}' is not a .npy array", path, m.name);
    const std::string name = m.name.substr(0, m.name.size() - 4);
    found[name] = io::npy_to_tensor_f32(m.bytes, path + ": tensor '" + name + "'");
  }
  assign_weights(model, found, path);
  return model;
}

// Contiguous CPU copies of the weights (views are fine as they are), in canonical order.
std::vector<std::pair<std::string, Tensor>> cpu_weights(const ModelFile& model, const std::string& path) {
  with_path(path, [&] {
    model.config.validate();
    check_weights(model.weights, model.config);
    return 0;
  });
  check_vocab_for_save(model, path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : model.weights.named()) {
    MINIGPT_CHECK(t->defined(), "{}: cannot save: tensor '{}' is not allocated", path, name);
    out.emplace_back(name, t->device() == Device::CPU && t->is_contiguous() ? *t : t->to(Device::CPU).clone());
  }
  return out;
}

}  // namespace

ModelFile load_model(const std::string& path) {
  return format_of(path) == Format::Safetensors ? load_safetensors(path) : load_npz(path);
}

void save_model(const std::string& path, const ModelFile& model) {
  const Format format = format_of(path);
  const auto tensors = cpu_weights(model, path);
  std::string vocab_json, config_json;
  try {  // a token that is not valid UTF-8 cannot go into JSON
    vocab_json = json(model.vocab).dump();
    config_json = model.config.to_json().dump();
  } catch (const json::exception& e) {
    MINIGPT_FAIL("{}: cannot save: vocab is not valid UTF-8 ({})", path, e.what());
  }
  if (format == Format::Safetensors) {
    std::vector<io::SafetensorsItem> items;
    for (const auto& [name, t] : tensors) items.push_back(io::f32_item(name, t));
    std::map<std::string, std::string> meta = {{"format", kFormatTag},
                                               {"config", config_json},
                                               {"vocab", vocab_json}};
    io::write_safetensors(path, items, meta);
    return;
  }
  std::vector<io::NpzMember> members;
  for (const auto& [name, t] : tensors) members.push_back({name + ".npy", io::encode_npy_f32(t)});
  // {"config": {...}, "vocab": [...]}, as model_file.h documents (no format tag: the member
  // name marks the file).
  const std::string meta = "{\"config\":" + config_json + ",\"vocab\":" + vocab_json + "}";
  members.push_back({kNpzMetadata, io::encode_npy_u8(std::span<const uint8_t>(
                                       reinterpret_cast<const uint8_t*>(meta.data()), meta.size()))});
  io::write_npz(path, members);
}

}  // namespace minigpt
