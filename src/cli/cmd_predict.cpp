// `minigpt predict -m MODEL [-k 5] [--json] "text"`: the model's top-k next tokens after a
// prompt, with their probabilities.
//
// The prompt is tokenized with the model file's vocabulary and preceded by <bos>, as every
// training sentence is; unknown words become <unk> with a warning on stderr. A prompt longer
// than the context keeps its last block_size tokens (and says so on stderr).
#include "cli/commands.h"
#include "cli/device.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

struct PredictOptions {
  std::string model;
  int top_k = 5;
  bool json = false;
  bool compile = false;
  std::string device = "cpu";
  std::string prompt;
};

void run_predict(const PredictOptions& opt, const GlobalOptions& global) {
  ModelFile file = load_model(resolve_model_path(opt.model));
  const Tokenizer tokenizer(file.vocab);
  const GrammarMiniGPT model(file.config, std::move(file.weights));
  const int64_t V = model.config().vocab_size, block = model.config().block_size;

  Tokenizer::Encoded enc = tokenizer.encode(opt.prompt);
  for (const std::string& w : enc.unknown) {
    fmt::print(stderr, "minigpt: warning: '{}' is not in the model's vocabulary; it becomes <unk>\n", w);
  }
  std::vector<int32_t> ids = {Tokenizer::kBos};
  ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
  if (static_cast<int64_t>(ids.size()) > block) {
    fmt::print(stderr, "minigpt: warning: the prompt has {} tokens with <bos>; using the last {} (the model's context)\n",
               ids.size(), block);
    ids.erase(ids.begin(), ids.end() - block);
  }

  ThreadPool pool(global.resolved_threads());
  Tensor logits, probs;
  const int64_t T = static_cast<int64_t>(ids.size());
  if (opt.compile) {
    compile::CompiledModel compiled(model);  // the compiled forward (minigpt compile)
    compiled.forward(ids.data(), 1, T, logits, probs, pool);
  } else {
    DeviceForward(model, opt.device).forward(ids.data(), 1, T, logits, probs, pool);
  }
  const float* last = probs.data() + (T - 1) * V;  // distribution of the token after the prompt

  const int64_t k = std::min<int64_t>(opt.top_k, V);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return last[a] > last[b] || (last[a] == last[b] && a < b);
  });

  if (opt.json) {
    nlohmann::ordered_json j;  // keys in the documented order: prompt, top; token, prob
    j["prompt"] = opt.prompt;
    j["top"] = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < k; ++i) {
      const int32_t id = order[static_cast<size_t>(i)];
      j["top"].push_back(nlohmann::ordered_json{{"token", tokenizer.token(id)}, {"prob", last[id]}});
    }
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("prompt: {}\n", opt.prompt);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = order[static_cast<size_t>(i)];
    fmt::print("{:>2}. {:<16} {:.4f}\n", i + 1, tokenizer.token(id), last[id]);
  }
}

}  // namespace

void add_predict_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "Top-k next tokens after a prompt");
  cmd->add_option("-m,--model", opt->model, "model file (default: the shipped model)");
  cmd->add_option("-k,--top-k", opt->top_k, "how many tokens to show")->check(CLI::Range(1, 1000000));
  auto* compile = cmd->add_flag("--compile", opt->compile, "run the compiled forward (minigpt compile) instead of eager");
  add_device_option(cmd, opt->device)->excludes(compile);
  cmd->add_flag("--json", opt->json, "print {\"prompt\": ..., \"top\": [{\"token\": ..., \"prob\": ...}]}");
  cmd->add_option("prompt", opt->prompt, "the text before the token to predict")->required();
  cmd->callback([opt, &global] { run_predict(*opt, global); });
}

}  // namespace minigpt::cli
