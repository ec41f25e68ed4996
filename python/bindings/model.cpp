// Bindings of the model: model files (load/save), GrammarMiniGPT forward on the CPU (with the
// per-layer trace) or a GPU (model/cuda/cuda_gpt.h), predict and generate from text, and the
// training forward + backward returning every parameter's gradient.
//
// Python sees `Model`: Model.load(path, device="cpu"), Model.from_weights(config, vocab,
// weights), .device, .config (dict, the JSON keys of ModelConfig), .vocab, .weights() (dict
// name -> float32 array, a copy), .save(path), .forward(ids, trace=False), .predict(text, k),
// .generate(prompt, n, temperature, top_k, seed) (the text `minigpt predict/generate` print),
// .loss_and_grads(ids, targets), .decode(ids) (the KV-cache path, one token at a time),
// .compile(mode=...) -> CompiledModel (minigpt compile: .forward(ids) as Model.forward, .kernels,
// .source, .compiles).
// device="cuda" is checked at load (built with CUDA, a GPU visible) and is a core.Error (a
// RuntimeError) saying which is missing; forward, predict and generate run on the model's device,
// everything else on the CPU.
// Compute runs with the GIL released on the module's thread pool; a mutex per Model serialises
// calls on one Model (forward_train keeps state for the backward).
//
// Not here: the sampler (model/sampling.h), the optimiser.
#include "common.h"

#include "compile/runner.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/cuda/cuda_gpt.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "model/sampling.h"
#include "model/weights.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

namespace minigpt::py {

namespace {

// A Python dict {"n_layer": 4, ...} -> ModelConfig, through ModelConfig::from_json (which
// validates and rejects unknown keys).
ModelConfig config_from_dict(const nb::dict& d) {
  nlohmann::json j = nlohmann::json::object();
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (nb::isinstance<bool>(value)) throw nb::type_error(("config['" + k + "'] must be a number").c_str());
    if (nb::isinstance<nb::int_>(value)) j[k] = nb::cast<int64_t>(value);
    else if (nb::isinstance<nb::float_>(value)) j[k] = nb::cast<double>(value);
    else throw nb::type_error(("config['" + k + "'] must be a number").c_str());
  }
  return ModelConfig::from_json(j);
}

nb::dict config_to_dict(const ModelConfig& c) {
  nb::dict d;
  d["n_layer"] = c.n_layer;
  d["n_head"] = c.n_head;
  d["d_model"] = c.d_model;
  d["block_size"] = c.block_size;
  d["vocab_size"] = c.vocab_size;
  d["layernorm_eps"] = static_cast<double>(c.layernorm_eps);
  return d;
}

// Copies dict name -> float32 array into weights laid out for config; every name, shape and
// dtype checked (errors name the tensor), unknown names rejected.
ModelWeights weights_from_dict(const nb::dict& d, const ModelConfig& config) {
  ModelWeights w = ModelWeights::allocate(config);
  std::set<std::string> expected;
  for (auto& [name, tensor] : w.named()) {
    expected.insert(name);
    if (!d.contains(name.c_str()))
      throw nb::value_error(("weights: missing tensor '" + name + "' (expected shape " +
                             shape_str(tensor->shape()) + ")").c_str());
    AnyArray a;
    if (!nb::try_cast<AnyArray>(d[name.c_str()], a))
      throw nb::type_error(("weights['" + name + "']: expected an array (np.ndarray of float32)").c_str());
    check_f32(a, "weights['" + name + "']");
    Shape shape;
    for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
    if (shape != tensor->shape())
      throw nb::value_error(("weights: tensor '" + name + "' has shape " + shape_str(shape) +
                             ", expected " + shape_str(tensor->shape())).c_str());
    if (tensor->numel()) std::memcpy(tensor->data(), a.data(), tensor->nbytes());
  }
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (!expected.count(k)) throw nb::value_error(("weights: unexpected tensor '" + k + "'").c_str());
  }
  return w;
}

nb::dict weights_to_dict(const ModelWeights& w, bool copy) {
  nb::dict d;
  for (const auto& [name, tensor] : w.named()) d[name.c_str()] = to_numpy(copy ? tensor->clone() : *tensor);
  return d;
}

// "cpu" or "cuda"; anything else is a ValueError. "cuda" needs a CUDA build and a visible GPU:
// without either it is a core.Error saying which, before any weight is read.
std::string checked_device(const std::string& device) {
  if (device == "cpu") return device;
  if (device != "cuda") throw nb::value_error(("unknown device '" + device + "' (cpu or cuda)").c_str());
  MINIGPT_CHECK(cuda_model_available(), "device='cuda': {}", cuda_model_unavailable_reason());
  return device;
}

// What Python holds: the model (its weights stay on the CPU for weights(), save(), decode(),
// loss_and_grads() and compile()), its vocabulary and tokenizer, on device "cuda" a CudaGPT (a
// snapshot of the weights on the GPU) and the CudaDecoder generate() reuses, and a lock for
// forward_train/backward pairs and for the GPU objects (one caller at a time).
struct PyModel {
  PyModel(ModelConfig config, ModelWeights weights, std::vector<std::string> vocab, std::string device = "cpu")
      : model(std::move(config), std::move(weights)), vocab(std::move(vocab)), device(std::move(device)) {
    MINIGPT_CHECK(static_cast<int>(this->vocab.size()) == model.config().vocab_size,
                  "vocab has {} tokens, config says vocab_size = {}", this->vocab.size(),
                  model.config().vocab_size);
    tokenizer = std::make_unique<Tokenizer>(this->vocab);
    if (this->device == "cuda") gpu = std::make_unique<CudaGPT>(model);  // uploads the weights
  }
  // GrammarMiniGPT::forward on the model's device (host ids in, host logits and probs out).
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs, ThreadPool& pool) {
    if (gpu) gpu->forward(ids, B, T, logits, probs);
    else model.forward(ids, B, T, logits, probs, pool);
  }
  GrammarMiniGPT model;
  std::vector<std::string> vocab;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string device;
  std::unique_ptr<CudaGPT> gpu;               // device "cuda" only
  std::unique_ptr<CudaDecoder> gpu_decoder;   // made by the first generate (captures its graph); before gpu in destruction
  std::mutex mutex;
};

// <bos> and the tokens of text, as `minigpt predict/generate` read a prompt; a word outside the
// vocabulary is a ValueError naming it (the CLI warns and reads <unk>; a library should not).
std::vector<int32_t> prompt_ids(const PyModel& p, std::string_view text, const char* what) {
  Tokenizer::Encoded enc = p.tokenizer->encode(text);
  if (!enc.unknown.empty()) {
    std::string words;
    for (const std::string& w : enc.unknown) words += (words.empty() ? "'" : ", '") + w + "'";
    throw nb::value_error((std::string(what) + ": not in the model's vocabulary: " + words).c_str());
  }
  std::vector<int32_t> ids = {Tokenizer::kBos};
  ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
  return ids;
}

// The k most likely next tokens after text (<bos> first; a prompt longer than the context keeps
// its last block_size tokens), most likely first, ties to the lower id: `minigpt predict`.
std::vector<std::pair<std::string, float>> predict(PyModel& p, std::string_view text, int k) {
  if (k < 1) throw nb::value_error(("predict: k must be >= 1, got " + std::to_string(k)).c_str());
  std::vector<int32_t> ids = prompt_ids(p, text, "predict");
  const int64_t V = p.model.config().vocab_size, block = p.model.config().block_size;
  if (static_cast<int64_t>(ids.size()) > block) ids.erase(ids.begin(), ids.end() - block);
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor logits, probs;
  {
    auto pool = current_pool();
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(p.mutex);
    p.forward(ids.data(), 1, T, logits, probs, *pool);
  }
  const float* last = probs.data() + (T - 1) * V;  // (V): the token after the prompt
  const int64_t top = std::min<int64_t>(k, V);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int32_t a, int32_t b) { return last[a] > last[b] || (last[a] == last[b] && a < b); });
  std::vector<std::pair<std::string, float>> result;
  for (int64_t i = 0; i < top; ++i) result.emplace_back(p.tokenizer->token(order[i]), last[order[i]]);
  return result;
}

// `minigpt generate`'s sampling loop over a decoder (Decoder with its pool, or CudaDecoder):
// feeds the prompt, then samples until n tokens, <eos> or a full context. Returns the new ids.
template <class Dec, class... Pool>
std::vector<int32_t> sample(Dec& decoder, std::span<const int32_t> prompt, const SamplingParams& params,
                            uint64_t seed, int n, Pool&... pool) {
  check_room_to_generate(static_cast<int64_t>(prompt.size()), decoder.capacity());
  const auto step = [&](int32_t id) { return decoder.step(id, pool...); };
  const auto full = [&] { return decoder.position() == decoder.capacity(); };
  return sample_loop(decoder.prefill(prompt, pool...), step, full, params, seed, n, Tokenizer::kEos).tokens;
}

// The text `minigpt generate -p prompt -n n --temp temperature --top-k top_k -s seed [--device
// cuda]` prints: the prompt's words and up to n sampled ones. The same seed gives the same text.
std::string generate(PyModel& p, std::string_view prompt, int n, float temperature, int top_k, uint64_t seed) {
  if (n < 0) throw nb::value_error(("generate: n must be >= 0, got " + std::to_string(n)).c_str());
  const SamplingParams params{temperature, top_k};
  params.validate();
  const std::vector<int32_t> ids = prompt_ids(p, prompt, "generate");
  std::vector<int32_t> generated;
  {
    auto pool = current_pool();
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.gpu) {
      if (!p.gpu_decoder) p.gpu_decoder = std::make_unique<CudaDecoder>(*p.gpu);
      p.gpu_decoder->reset();
      check_room_to_generate(static_cast<int64_t>(ids.size()), p.gpu_decoder->capacity());
      // the tokens chosen on the GPU where the decode loop takes the settings (the same tokens)
      generated = p.gpu_decoder->generate(ids, n, params, seed, Tokenizer::kEos).tokens;
    } else {
      Decoder decoder(p.model);
      generated = sample(decoder, ids, params, seed, n, *pool);
    }
  }
  const std::string text = p.tokenizer->decode(std::span<const int32_t>(ids).subspan(1));
  const std::string continuation = p.tokenizer->decode(generated);
  return text + (text.empty() || continuation.empty() ? "" : " ") + continuation;
}

}  // namespace

// Model.compile(): the compiled forward, bound to the model's weights (which the Python Model
// keeps alive). Compiles for each new (B, T) on first use (the shape guard).
struct PyCompiled {
  PyCompiled(PyModel& p, compile::CompileOptions opt) : compiled(p.model, std::move(opt)) {}
  compile::CompiledModel compiled;
  std::mutex mutex;
};

void bind_model(nb::module_& m) {
  nb::class_<PyCompiled>(m, "CompiledModel", "Model.compile(): the forward as generated, fused C++ kernels.")
      .def("forward", [](PyCompiled& c, const AnyArray& ids_array) {
        int64_t B = 0, T = 0;
        const std::vector<int32_t> ids = to_ids(ids_array, "ids", B, T);
        Tensor logits, probs;
        {
          auto pool = current_pool();
          nb::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(c.mutex);
          c.compiled.forward(ids.data(), B, T, logits, probs, *pool);
        }
        return nb::make_tuple(to_numpy(logits), to_numpy(probs));
      }, nb::arg("ids"), "ids (B, T) -> (logits, probs) as Model.forward; a new (B, T) compiles anew.")
      .def("kernels", [](PyCompiled& c, int64_t B, int64_t T) {
        std::lock_guard<std::mutex> lock(c.mutex);
        std::vector<std::string> names;
        for (const compile::Kernel& k : c.compiled.graph_for(B, T).schedule().kernels) names.push_back(k.name);
        return names;
      }, nb::arg("batch"), nb::arg("seq"), "The generated kernels' names for (B, T), in call order.")
      .def("source", [](PyCompiled& c, int64_t B, int64_t T) {
        std::lock_guard<std::mutex> lock(c.mutex);
        return c.compiled.graph_for(B, T).code().source;
      }, nb::arg("batch"), nb::arg("seq"), "The generated C++ source for (B, T).")
      .def_prop_ro("compiles", [](PyCompiled& c) { return c.compiled.compiles(); });

  m.def("load_model", [](const std::string& path) {
    ModelFile f;
    {
      nb::gil_scoped_release release;
      f = load_model(path);
    }
    return nb::make_tuple(config_to_dict(f.config), f.vocab, weights_to_dict(f.weights, false));
  }, nb::arg("path"),
  "Loads a .safetensors or .npz model file with the C++ loader: (config dict, vocab list, "
  "weights dict name -> float32 array).");

  m.def("save_model", [](const std::string& path, const nb::dict& config, std::vector<std::string> vocab,
                         const nb::dict& weights) {
    ModelFile f;
    f.config = config_from_dict(config);
    f.vocab = std::move(vocab);
    MINIGPT_CHECK(static_cast<int>(f.vocab.size()) == f.config.vocab_size,
                  "vocab has {} tokens, config says vocab_size = {}", f.vocab.size(), f.config.vocab_size);
    f.weights = weights_from_dict(weights, f.config);
    nb::gil_scoped_release release;
    save_model(path, f);
  }, nb::arg("path"), nb::arg("config"), nb::arg("vocab"), nb::arg("weights"),
  "Writes a model file with the C++ writer (format by extension, atomic).");

  nb::class_<PyModel>(m, "Model", "GrammarMiniGPT in C++ (fp32) on the CPU or a CUDA GPU: Model.load(path, device).")
      .def_static("load", [](const std::string& path, const std::string& device) {
        const std::string where = checked_device(device);
        ModelFile f;
        {
          nb::gil_scoped_release release;
          f = load_model(path);
        }
        return new PyModel(std::move(f.config), std::move(f.weights), std::move(f.vocab), where);
      }, nb::arg("path"), nb::arg("device") = "cpu", nb::rv_policy::take_ownership,
      "Loads a .safetensors or .npz model file onto device 'cpu' or 'cuda' (a ValueError for any "
      "other name; core.Error when the module has no CUDA or no GPU is visible).")
      .def_static("from_weights", [](const nb::dict& config, std::vector<std::string> vocab, const nb::dict& weights) {
        ModelConfig c = config_from_dict(config);
        ModelWeights w = weights_from_dict(weights, c);
        return new PyModel(c, std::move(w), std::move(vocab));
      }, nb::arg("config"), nb::arg("vocab"), nb::arg("weights"), nb::rv_policy::take_ownership,
      "A model from a config dict, a vocabulary and a dict name -> float32 array (copied).")
      .def_prop_ro("device", [](const PyModel& p) { return p.device; }, "'cpu' or 'cuda'.")
      .def_prop_ro("config", [](const PyModel& p) { return config_to_dict(p.model.config()); })
      .def_prop_ro("vocab", [](const PyModel& p) { return p.vocab; })
      .def("weights", [](PyModel& p) {
        std::lock_guard<std::mutex> lock(p.mutex);
        return weights_to_dict(p.model.weights(), true);
      }, "Every parameter as a float32 array (a copy), by state_dict name, in canonical order.")
      .def("save", [](PyModel& p, const std::string& path) {
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(p.mutex);
        // Tensor copies share storage: no weight bytes are copied here.
        const ModelFile f{p.model.config(), p.vocab, p.model.weights()};
        save_model(path, f);
      }, nb::arg("path"), "Writes the model (format by extension, atomic).")
      .def("forward", [](PyModel& p, const AnyArray& ids_array, bool trace) -> nb::object {
        int64_t B = 0, T = 0;
        const std::vector<int32_t> ids = to_ids(ids_array, "ids", B, T);
        if (trace && p.gpu)
          throw nb::value_error("forward: trace=True runs on the CPU only; load the model with device='cpu'");
        Tensor logits, probs;
        ForwardTrace tr;
        {
          auto pool = current_pool();
          nb::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(p.mutex);
          if (trace) p.model.forward(ids.data(), B, T, logits, probs, *pool, &tr);
          else p.forward(ids.data(), B, T, logits, probs, *pool);
        }
        if (!trace) return nb::make_tuple(to_numpy(logits), to_numpy(probs));
        nb::dict layers;
        layers["embed"] = to_numpy(tr.embed);
        for (size_t i = 0; i < tr.blocks.size(); ++i) layers[("blocks." + std::to_string(i)).c_str()] = to_numpy(tr.blocks[i]);
        layers["ln_f"] = to_numpy(tr.ln_f);
        layers["logits"] = to_numpy(tr.logits);
        return nb::make_tuple(to_numpy(logits), to_numpy(probs), layers);
      }, nb::arg("ids"), nb::arg("trace") = false,
      "ids (B, T) int32/int64 -> (logits, probs), each (B, T, V) float32, computed on the model's "
      "device; with trace=True (CPU only) also a dict of every layer's output: embed, blocks.{i}, "
      "ln_f, logits.")
      .def("predict", &predict, nb::arg("text"), nb::arg("k") = 5,
      "The k most likely next tokens after text, as [(token, probability)], most likely first "
      "(what `minigpt predict` prints). The prompt is read after <bos>; a longer one than the "
      "context keeps its last block_size tokens; a word outside the vocabulary is a ValueError.")
      .def("generate", &generate, nb::arg("prompt") = "", nb::arg("n") = 32, nb::arg("temperature") = 0.8f,
           nb::arg("top_k") = 40, nb::arg("seed") = 42,
      "The prompt's words and up to n sampled ones (temperature 0: greedy; top_k 0: all tokens), "
      "stopping at <eos> or a full context: the text `minigpt generate` prints for the same "
      "arguments and seed.")
      .def("decode", [](PyModel& p, const AnyArray& ids_array) {
        int64_t B = 0, T = 0;
        const std::vector<int32_t> ids = to_ids(ids_array, "ids", B, T);
        if (B != 1) throw nb::value_error(("decode: ids must be one sequence (1, T), got " + shape_of(ids_array)).c_str());
        const int64_t V = p.model.config().vocab_size;
        Tensor logits = Tensor::empty({1, T, V});
        {
          auto pool = current_pool();
          nb::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(p.mutex);
          Decoder decoder(p.model);
          for (int64_t t = 0; t < T; ++t) {
            const std::span<const float> row = decoder.step(ids[static_cast<size_t>(t)], *pool);
            std::memcpy(logits.data() + t * V, row.data(), static_cast<size_t>(V) * sizeof(float));
          }
        }
        return to_numpy(logits);
      }, nb::arg("ids"),
      "KV-cache decoding of one sequence ids (1, T), one token at a time: logits (1, T, V), "
      "position t predicting token t+1 (equal to forward's within 1e-5).")
      .def("compile", [](PyModel& p, const std::string& mode) {
        compile::CompileOptions o;
        o.mode = mode;
        o.quiet = true;
        return new PyCompiled(p, o);
      }, nb::arg("mode") = "default", nb::keep_alive<0, 1>(), nb::rv_policy::take_ownership,
      "The compiled forward (minigpt compile; mode 'default' or 'max-autotune'): a CompiledModel "
      "whose forward(ids) matches Model.forward within 1e-5.")
      .def("loss_and_grads", [](PyModel& p, const AnyArray& ids_array, const AnyArray& targets_array) {
        int64_t B = 0, T = 0, Bt = 0, Tt = 0;
        const std::vector<int32_t> ids = to_ids(ids_array, "ids", B, T);
        const std::vector<int32_t> targets = to_ids(targets_array, "targets", Bt, Tt);
        if (B != Bt || T != Tt)
          throw nb::value_error(("targets: shape " + shape_of(targets_array) + " differs from ids " +
                                 shape_of(ids_array)).c_str());
        float loss = 0.0f;
        ModelWeights grads = ModelWeights::zeros_like(p.model.config());
        {
          auto pool = current_pool();
          nb::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(p.mutex);
          loss = p.model.forward_train(ids.data(), targets.data(), B, T, *pool);
          p.model.backward(grads, *pool);
        }
        return nb::make_tuple(loss, weights_to_dict(grads, false));
      }, nb::arg("ids"), nb::arg("targets"),
      "Mean cross-entropy over targets != -1 and d(loss)/d(param) for every parameter: "
      "(loss, dict name -> float32 array).");
}

}  // namespace minigpt::py
