// `minigpt forward -m MODEL --ids "3 17 42" | --ids-file IDS.npy [--out LOGITS.npy]`:
// runs GrammarMiniGPT::forward on token ids and prints the logits (B, T, V), one line per
// position, or writes them as a float32 .npy (atomically: no half-written file on error).
// --ids gives one sequence (B = 1); an ids file holds (T) or (B, T) int32/int64 ids. MODEL may
// also be a graph written by `minigpt compile --export` (told by its metadata, compile/export.h):
// it runs compiled at the (B, T) it was exported for, and ids of another shape are an Error.
#include "cli/commands.h"
#include "cli/device.h"
#include "compile/export.h"
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
  std::string device = "cpu";
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

// Writes logits (B, T, V) to --out, else prints them one row per position.
void print_logits(const ForwardOptions& opt, const Tensor& logits, int64_t B, int64_t T) {
  if (!opt.out.empty()) {
    io::write_npy_f32(opt.out, logits);
    fmt::print(stderr, "wrote logits {} to {}\n", shape_str(logits.shape()), opt.out);
    return;
  }
  const int64_t V = logits.shape().back();
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


// An exported graph (`minigpt compile --export`) run through the compiler at the shapes it was
// captured at: its i32 input "ids" must have exactly the shape (B, T) of the given ids, and every
// id must index its embedding table (the generated gather does not check). Returns the logits.
Tensor run_exported(const std::string& path, const std::vector<int32_t>& ids, int64_t B, int64_t T, ThreadPool& pool) {
  compile::ExportedGraph ex = compile::load_exported_graph(path);
  const compile::Graph& g = ex.graph;
  compile::WeightBinding w;
  for (auto& [name, t] : ex.weights) {
    w.values[name] = t.data();
    if (t.dim() == 2) w.shapes[name] = {t.shape()[0], t.shape()[1]};
  }
  std::vector<const void*> in;
  for (int id : g.inputs) {
    const compile::TensorInfo& ti = g.tensor(id);
    MINIGPT_CHECK(ti.name == "ids" && ti.dtype == compile::DType::I32,
                  "{}: graph {} takes input '{}' {}: forward runs graphs of token ids only", path, g.name, ti.name, shape_str(ti.shape));
    const Shape given{B, T};
    MINIGPT_CHECK(ti.shape == given, "{}: graph {} was exported for ids of shape {}, got {} ids of shape {}", path, g.name,
                  shape_str(ti.shape), ids.size(), shape_str(given));
    for (int n : g.consumers(id)) {
      const int64_t V = g.tensor(g.nodes[static_cast<size_t>(n)].inputs[1]).shape[0];
      for (int32_t v : ids) MINIGPT_CHECK(v >= 0 && v < V, "token id {} is outside the vocabulary [0, {})", v, V);
    }
    in.push_back(ids.data());
  }
  std::vector<Tensor> outs;
  std::vector<float*> out_ptrs;
  int logits = -1;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const compile::TensorInfo& ti = g.tensor(g.outputs[k]);
    outs.push_back(Tensor::empty(Shape(ti.shape.begin(), ti.shape.end())));
    out_ptrs.push_back(outs.back().data());
    if (ti.name == "logits") logits = static_cast<int>(k);
  }
  MINIGPT_CHECK(logits >= 0, "{}: graph {} has no output named 'logits'", path, g.name);
  compile::CompileOptions co;
  co.quiet = true;
  compile::CompiledGraph cg(g, w, co);
  cg.run(in, out_ptrs, pool);
  return std::move(outs[static_cast<size_t>(logits)]);
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
  const std::string path = resolve_model_path(opt.model);
  ThreadPool pool(global.resolved_threads());
  Tensor logits, probs;
  if (compile::is_exported_graph(path)) {  // `minigpt compile --export`: runs compiled, at its shapes
    MINIGPT_CHECK(!is_cuda(opt.device), "{}: an exported graph runs on the CPU only (drop --device cuda)", path);
    logits = run_exported(path, ids, B, T, pool);
    print_logits(opt, logits, B, T);
    return;
  }
  ModelFile file = load_model(path);
  const GrammarMiniGPT model(file.config, std::move(file.weights));
  if (opt.compile) {
    compile::CompiledModel compiled(model);  // the compiled forward (minigpt compile)
    compiled.forward(ids.data(), B, T, logits, probs, pool);  // validates T and every id
  } else {
    DeviceForward(model, opt.device).forward(ids.data(), B, T, logits, probs, pool);  // validates T and every id
  }
  print_logits(opt, logits, B, T);
}

}  // namespace

void add_forward_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<ForwardOptions>();
  CLI::App* cmd = app.add_subcommand("forward", "Logits (B, T, V) of token ids");
  cmd->add_option("-m,--model", opt->model, "model file (.safetensors or .npz; default: the shipped model)");
  auto* ids = cmd->add_option("--ids", opt->ids, "token ids of one sequence, e.g. \"3 17 42\"");
  auto* file = cmd->add_option("--ids-file", opt->ids_file, ".npy of int32/int64 ids, shape (T) or (B, T)");
  ids->excludes(file);
  auto* compile = cmd->add_flag("--compile", opt->compile, "run the compiled forward (minigpt compile) instead of eager");
  add_device_option(cmd, opt->device)->excludes(compile);
  cmd->add_option("--out", opt->out, "write the logits to this .npy file instead of printing them");
  cmd->callback([opt, &global] {
    MINIGPT_CHECK(!opt->ids.empty() || !opt->ids_file.empty(), "forward: give --ids or --ids-file");
    run_forward_command(*opt, global);
  });
}

}  // namespace minigpt::cli
