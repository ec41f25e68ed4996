// `minigpt forward -m MODEL --ids "3 17 42" | --ids-file IDS.npy [--out LOGITS.npy]`:
// runs GrammarMiniGPT::forward on token ids and prints the logits (B, T, V), one line per
// position, or writes them as a float32 .npy (atomically: no half-written file on error).
// --ids gives one sequence (B = 1); an ids file holds (T) or (B, T) int32/int64 ids.
#include "cli/commands.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <fmt/format.h>

#include <charconv>
#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

struct ForwardOptions {
  std::string model;
  std::string ids;
  std::string ids_file;
  std::string out;
  bool compile = false;
};

// "3 17 42" (spaces, tabs or commas between ids) -> {3, 17, 42}; anything else is an Error.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == ',' || c == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != ',' && text[j] != '\n') ++j;
    const std::string word = text.substr(i, j - i);
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    MINIGPT_CHECK(ec == std::errc() && end == word.data() + word.size(),
                  "--ids: '{}' is not an integer token id", word);
    MINIGPT_CHECK(value >= 0 && value <= INT32_MAX, "--ids: token id {} is negative or too large", value);
    ids.push_back(static_cast<int32_t>(value));
    i = j;
  }
  MINIGPT_CHECK(!ids.empty(), "--ids: no token ids given");
  return ids;
}

void run_forward_command(const ForwardOptions& opt, const GlobalOptions& global) {
  std::vector<int32_t> ids;
  int64_t B = 1, T = 0;
  if (!opt.ids.empty()) {
    ids = parse_ids(opt.ids);
    T = static_cast<int64_t>(ids.size());
  } else {
    io::TokenIds file = io::read_npy_token_ids(opt.ids_file);
    MINIGPT_CHECK(file.shape.size() == 1 || file.shape.size() == 2,
                  "{}: token ids must have shape (T) or (B, T), got {}", opt.ids_file,
                  shape_str(file.shape));
    B = file.shape.size() == 2 ? file.shape[0] : 1;
    T = file.shape.back();
    ids = std::move(file.ids);
  }
  ModelFile file = load_model(resolve_model_path(opt.model));
  const GrammarMiniGPT model(file.config, std::move(file.weights));
  ThreadPool pool(global.resolved_threads());
  Tensor logits, probs;
  if (opt.compile) {
    compile::CompiledModel compiled(model);  // the compiled forward (minigpt compile)
    compiled.forward(ids.data(), B, T, logits, probs, pool);  // validates T and every id
  } else {
    model.forward(ids.data(), B, T, logits, probs, pool);  // validates T and every id
  }

  if (!opt.out.empty()) {
    io::write_npy_f32(opt.out, logits);
    fmt::print(stderr, "wrote logits {} to {}\n", shape_str(logits.shape()), opt.out);
    return;
  }
  const int64_t V = model.config().vocab_size;
  fmt::print("# logits {} (batch, position, vocabulary)\n", shape_str(logits.shape()));
  const float* p = logits.data();
  std::string row;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      row = fmt::format("{} {}:", b, t);
      for (int64_t v = 0; v < V; ++v) row += fmt::format(" {:.7g}", p[(b * T + t) * V + v]);
      fmt::print("{}\n", row);
    }
  }
}

}  // namespace

void add_forward_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<ForwardOptions>();
  CLI::App* cmd = app.add_subcommand("forward", "Logits (B, T, V) of token ids");
  cmd->add_option("-m,--model", opt->model, "model file (.safetensors or .npz; default: the shipped model)");
  auto* ids = cmd->add_option("--ids", opt->ids, "token ids of one sequence, e.g. \"3 17 42\"");
  auto* file = cmd->add_option("--ids-file", opt->ids_file, ".npy of int32/int64 ids, shape (T) or (B, T)");
  ids->excludes(file);
  cmd->add_flag("--compile", opt->compile, "run the compiled forward (minigpt compile) instead of eager");
  cmd->add_option("--out", opt->out, "write the logits to this .npy file instead of printing them");
  cmd->callback([opt, &global] {
    MINIGPT_CHECK(!opt->ids.empty() || !opt->ids_file.empty(), "forward: give --ids or --ids-file");
    run_forward_command(*opt, global);
  });
}

}  // namespace minigpt::cli
