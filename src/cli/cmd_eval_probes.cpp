// `minigpt eval-probes [-m MODEL] [--probes FILE] [--json] [-v]`: top-1 accuracy of a model on
// the grammar probes (format: data/probes.h), per category and overall.
//
// Each prompt is fed as <bos> + its tokens; the model's argmax at the last position is
// correct if it is in the probe's word class. The model file's vocabulary is used as is; a
// probe or class word missing from it is an Error naming the word, and a vocabulary that
// differs from the grammar corpus's gets a warning (the model was trained on other text).
#include "cli/commands.h"
#include "cli/device.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "data/corpus.h"
#include "data/probes.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

inline constexpr const char* kDefaultProbes = "tests/probes/grammar_probes.tsv";

struct EvalProbesOptions {
  std::string model;
  std::string probes;
  bool json = false;
  bool verbose = false;
  std::string device = "cpu";
};

// The given probe file, else the default one relative to the working directory, then to the
// source tree.
std::string resolve_probes_path(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  for (const fs::path& root : {fs::current_path(), fs::path(MINIGPT_SOURCE_DIR)}) {
    const fs::path candidate = root / kDefaultProbes;
    if (fs::exists(candidate)) return candidate.string();
  }
  MINIGPT_FAIL("no probe file given (--probes) and the default '{}' was not found", kDefaultProbes);
}

void run_eval_probes(const EvalProbesOptions& opt, const GlobalOptions& global) {
  const std::string model_path = resolve_model_path(opt.model);
  const std::string probes_path = resolve_probes_path(opt.probes);
  ModelFile file = load_model(model_path);
  const std::vector<data::Probe> probes = data::load_probes(probes_path);
  if (file.vocab != data::corpus_vocabulary())
    fmt::print(stderr, "minigpt: warning: the model's vocabulary ({} tokens) differs from the grammar corpus's ({} tokens)\n",
               file.vocab.size(), data::corpus_vocabulary().size());
  const Tokenizer tokenizer(file.vocab);
  const GrammarMiniGPT model(file.config, std::move(file.weights));
  const int64_t V = model.config().vocab_size, block = model.config().block_size;
  ThreadPool pool(global.resolved_threads());
  const data::Grammar grammar;

  DeviceForward runner(model, opt.device);
  Tensor logits, probs;
  auto top1 = [&](std::span<const int32_t> ids) -> int32_t {
    const int64_t T = static_cast<int64_t>(ids.size());
    MINIGPT_CHECK(T <= block, "a probe prompt has {} tokens with <bos>, more than the model's context of {}", T, block);
    runner.forward(ids.data(), 1, T, logits, probs, pool);
    const float* last = logits.data() + (T - 1) * V;
    int32_t best = 0;
    for (int32_t v = 1; v < V; ++v)
      if (last[v] > last[best]) best = v;  // ties go to the lower id
    return best;
  };
  const data::ProbeReport report = data::score_probes(probes, grammar, tokenizer, top1);

  if (opt.json) {
    nlohmann::json j;
    j["model"] = model_path;
    j["probes"] = probes_path;
    auto score = [](const data::CategoryScore& c) {
      return nlohmann::json{{"category", c.category}, {"correct", c.correct}, {"total", c.total}, {"accuracy", c.accuracy()}};
    };
    j["categories"] = nlohmann::json::array();
    for (const data::CategoryScore& c : report.categories) j["categories"].push_back(score(c));
    j["overall"] = score(report.overall);
    j["failures"] = nlohmann::json::array();
    for (const data::ProbeOutcome& o : report.outcomes)
      if (!o.correct)
        j["failures"].push_back({{"line", o.probe->line}, {"category", o.probe->category}, {"prompt", o.probe->prompt},
                                 {"class", o.probe->word_class}, {"predicted", tokenizer.token(o.predicted)}});
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("model:  {}\nprobes: {} ({} prompts)\n\n", model_path, probes_path, probes.size());
  fmt::print("| {:<20} | {:>7} | {:>5} | {:>8} |\n", "category", "correct", "total", "top-1");
  fmt::print("| {:-<20} | {:->7} | {:->5} | {:->8} |\n", "", "", "", "");
  auto row = [](const data::CategoryScore& c) {
    fmt::print("| {:<20} | {:>7} | {:>5} | {:>7.1f}% |\n", c.category, c.correct, c.total, 100.0 * c.accuracy());
  };
  for (const data::CategoryScore& c : report.categories) row(c);
  row(report.overall);
  const auto failures = report.overall.total - report.overall.correct;
  if (failures > 0 && opt.verbose) {
    fmt::print("\nwrong predictions:\n");
    for (const data::ProbeOutcome& o : report.outcomes)
      if (!o.correct)
        fmt::print("  line {:>3}  {:<18} \"{}\" -> {} (want {})\n", o.probe->line, o.probe->category, o.probe->prompt,
                   tokenizer.token(o.predicted), o.probe->word_class);
  } else if (failures > 0) {
    fmt::print("\n{} wrong; -v lists them\n", failures);
  }
}

}  // namespace

void add_eval_probes_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<EvalProbesOptions>();
  CLI::App* cmd = app.add_subcommand("eval-probes", "Top-1 accuracy on the grammar probes, per category");
  cmd->add_option("-m,--model", opt->model, "model file (default: the shipped model)");
  cmd->add_option("--probes", opt->probes, fmt::format("probe file (default: {})", kDefaultProbes));
  cmd->add_flag("--json", opt->json, "print the scores and the failures as JSON");
  cmd->add_flag("-v,--verbose", opt->verbose, "list every wrong prediction");
  add_device_option(cmd, opt->device);
  cmd->callback([opt, &global] { run_eval_probes(*opt, global); });
}

}  // namespace minigpt::cli
