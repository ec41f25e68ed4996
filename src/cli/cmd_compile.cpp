// `minigpt compile --graph tinyhead|gpt|decode [--batch B --seq T | --pos t] [-m MODEL] [--dump DIR] [--explain]
// [--mode default|max-autotune] [--device cpu|cuda] [--export FILE]`: captures the graph, runs the passes,
// generates the C++ (or, with --device cuda, CUDA: cmd_compile_cuda.cpp), compiles it through the JIT
// cache and reports the kernels and the compile times.
// --export FILE instead writes the captured graph and its weights as one file (compile/export.h)
// that `minigpt forward -m FILE` runs.
//
// --dump DIR writes what MINIGPT_COMPILE_DEBUG=1 writes (ir_pre_fusion.txt,
// ir_post_fusion.txt, schedule.txt, output_code.cpp, kernels/*.cpp). --explain runs the
// compiled graph and prints, per kernel: the ops fused, the intermediate tensors it keeps out
// of memory against eager (with their bytes), bytes moved, FLOPs, the measured time (median,
// kernel run alone on warm data) and the fraction of the roofline floor
// max(bytes / bandwidth, FLOPs / FMA peak) it reaches. The bandwidth is a measured in-cache
// memcpy (these graphs' tensors live in L1/L2) and the peak threads x one core's measured FMA
// rate (autotune.h's fma_peak).
#include "cli/cmd_compile_cuda.h"
#include "cli/commands.h"
#include "compile/autotune.h"
#include "compile/capture.h"
#include "compile/export.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

struct CompileCliOptions {
  std::string graph = "gpt";
  std::string model;
  int64_t batch = 2, seq = 16;
  int64_t pos = 15;  // decode: tokens already cached
  std::string dump;
  std::string export_path;  // --export FILE: write the captured graph and its weights, then stop
  bool explain = false;
  std::string mode = "default";
  std::string device = "cpu";  // cpu: generated C++; cuda: generated CUDA (cmd_compile_cuda.cpp)
  int runs = 200;
};

// Best in-cache copy bandwidth (bytes/s) over a 256 KiB buffer.
double cache_bandwidth() {
  const size_t n = 256 * 1024;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 0;
  for (int r = 0; r < 200; ++r) {
    Timer t;
    std::memcpy(b.data(), a.data(), n);
    const double s = t.elapsed_s();
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(n) / s);  // read + write
    a[static_cast<size_t>(r) % n] = b[(static_cast<size_t>(r) * 7) % n];
  }
  return best;
}

double median_us(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void run_compile(const CompileCliOptions& opt, const GlobalOptions& global) {
  using namespace compile;
  ThreadPool pool(global.resolved_threads());
  CompileOptions co;
  co.mode = opt.mode;
  co.dump_dir = opt.dump;
  WeightBinding weights;
  Graph captured;
  std::vector<std::vector<int32_t>> ids;
  std::vector<Tensor> fin;
  std::vector<const void*> inputs;
  std::vector<Tensor> outs;
  std::unique_ptr<GrammarMiniGPT> model;
  TinyHead head;
  std::mt19937_64 rng(42);
  int64_t vocab = 1;
  if (opt.graph == "tinyhead") {
    head = TinyHead::init(42);
    weights = bind_tinyhead(head);
    captured = capture_tinyhead(opt.batch);
  } else {
    MINIGPT_CHECK(opt.graph == "gpt" || opt.graph == "decode", "--graph must be tinyhead, gpt or decode, got '{}'", opt.graph);
    ModelFile f = load_model(resolve_model_path(opt.model));
    model = std::make_unique<GrammarMiniGPT>(f.config, std::move(f.weights));
    weights = bind_weights(model->weights());
    vocab = model->config().vocab_size;
    // decode: one graph for every position; --pos is the value its "pos" input runs with
    captured = opt.graph == "gpt" ? capture_gpt(model->config(), opt.batch, opt.seq) : capture_gpt_decode(model->config());
  }
  if (!opt.export_path.empty()) {  // the graph as capture made it (the reader runs the passes)
    export_graph(opt.export_path, captured, weights.values);
    fmt::print("exported graph {} ({} nodes, {} weights, format {} v{}) to {}\n", captured.name, captured.nodes.size(),
               captured.weights.size(), kGraphFormatTag, kGraphFormatVersion, opt.export_path);
    return;
  }
  // inputs drawn from seed 42 (never zeros): token ids, or normal floats (x, the KV caches)
  std::normal_distribution<float> nd;
  for (int t : captured.inputs) {
    const TensorInfo& ti = captured.tensor(t);
    if (ti.dtype == DType::I32) {
      ids.emplace_back(static_cast<size_t>(ti.numel()));
      for (int32_t& v : ids.back()) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      if (ti.name == "pos") ids.back()[0] = static_cast<int32_t>(opt.pos);  // decode: the runtime position
      inputs.push_back(ids.back().data());
    } else {
      fin.push_back(Tensor::empty(ti.shape));
      for (float& v : fin.back().span()) v = nd(rng);
      inputs.push_back(fin.back().data());
    }
  }
  if (opt.device == "cuda") {
    CompileCudaRequest r;
    r.captured = &captured;
    r.weights = &weights;
    r.inputs = inputs;
    r.mode = opt.mode;
    r.dump = opt.dump;
    r.explain = opt.explain;
    r.runs = opt.runs;
    run_compile_cuda(r);
    return;
  }
  for (int t : captured.outputs) outs.push_back(Tensor::empty(captured.tensor(t).shape));
  std::vector<float*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(t.data());

  Timer cold;
  CompiledGraph cg(captured, weights, co);
  const double first_s = cold.elapsed_s();
  Timer warm;
  CompiledGraph again(captured, weights, co);  // the same graph again: a cache hit
  const double warm_s = warm.elapsed_s();
  const Schedule& s = cg.schedule();
  fmt::print("graph {}: {} nodes captured -> {} kernels, arena {} bytes, mode {} (variant {})\n", captured.name,
             captured.nodes.size(), s.kernels.size(), s.graph.arena_bytes, opt.mode, cg.stats().variant);
  fmt::print("compile: {:.3f} s ({}; passes {:.1f} ms, codegen {:.1f} ms, jit {:.3f} s); again: {:.1f} ms ({})\n",
             first_s, cg.stats().cache_hit ? "cache hit" : "cold", cg.stats().passes_s * 1e3, cg.stats().codegen_s * 1e3,
             cg.stats().jit_s, warm_s * 1e3, again.stats().cache_hit ? "cache hit" : "compiled");
  fmt::print("library {} (key {})\n", cg.stats().key.substr(0, 16), cg.stats().key);
  if (!opt.dump.empty()) fmt::print("wrote the debug files to {}\n", opt.dump);
  for (const Kernel& k : s.kernels) fmt::print("  {}\n", k.name);
  if (!opt.explain) return;

  cg.run(inputs, out_ptrs, pool);
  const FmaPeak& fp = fma_peak();
  const double peak = pool.size() * fp.gflops * 1e9;
  const double bw = cache_bandwidth();
  fmt::print("\nexplain ({} threads; FMA peak {:.1f} GFLOP/s = {} x {:.1f} measured per core ({}); in-cache copy {:.1f} GB/s)\n",
             pool.size(), peak / 1e9, pool.size(), fp.gflops, fp.isa, bw / 1e9);
  fmt::print("| kernel | ops fused | removed vs eager | bytes moved | FLOPs | time (us) | roofline |\n");
  fmt::print("| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  double total_us = 0;
  for (size_t i = 0; i < s.kernels.size(); ++i) {
    const Kernel& k = s.kernels[i];
    std::vector<double> t;
    for (int r = 0; r < opt.runs; ++r) {
      Timer timer;
      cg.run_kernel(static_cast<int>(i), pool);
      t.push_back(timer.elapsed_us());
    }
    const double us = median_us(t);
    total_us += us;
    std::string ops, removed;
    for (int n : k.nodes) ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(s.graph.nodes[static_cast<size_t>(n)].op));
    int64_t removed_bytes = 0;
    for (int r : k.removed) removed_bytes += s.graph.tensor(r).bytes();
    removed = k.removed.empty() ? "-" : fmt::format("{} tensors, {} B", k.removed.size(), removed_bytes);
    const double bytes = static_cast<double>(k.bytes_read + k.bytes_written);
    const double floor_s = std::max(bytes / bw, static_cast<double>(k.flops) / peak);
    fmt::print("| {} | {} | {} | {} | {} | {:.2f} | {:.0f}% |\n", k.name, ops, removed, k.bytes_read + k.bytes_written, k.flops,
               us, 100.0 * floor_s / (us * 1e-6));
  }
  std::vector<double> whole;
  for (int r = 0; r < opt.runs; ++r) {
    Timer timer;
    cg.run(inputs, out_ptrs, pool);
    whole.push_back(timer.elapsed_us());
  }
  fmt::print("\nsum of kernels {:.2f} us; whole call() {:.2f} us (median of {})\n", total_us, median_us(whole), opt.runs);
  fmt::print("removed tensors are what eager stores between its kernels and this code keeps in registers\n");
}

}  // namespace

void add_compile_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<CompileCliOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a graph (TinyHead or the model) to fused C++ kernels");
  cmd->add_option("--graph", opt->graph, "tinyhead | gpt | decode (one KV-cache step)")
      ->check(CLI::IsMember({"tinyhead", "gpt", "decode"}));
  cmd->add_option("--pos", opt->pos, "decode: the position t the step runs at (tokens already cached)")->check(CLI::Range(0, 8192));
  cmd->add_option("-m,--model", opt->model, "model file (gpt; default: the shipped model)");
  cmd->add_option("--batch", opt->batch, "batch size B")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", opt->seq, "sequence length T (gpt)")->check(CLI::Range(1, 8192));
  cmd->add_option("--dump", opt->dump, "write the IR, the schedule and the generated code to this folder");
  cmd->add_option("--export", opt->export_path,
                  "write the captured graph with its weights to this one file (safetensors; `minigpt forward -m FILE` runs it)");
  cmd->add_flag("--explain", opt->explain, "per kernel: ops fused, tensors removed, bytes, FLOPs, time, roofline");
  cmd->add_option("--mode", opt->mode, "default | max-autotune")->check(CLI::IsMember({"default", "max-autotune"}));
  cmd->add_option("--device", opt->device, "cpu (generated C++) | cuda (generated CUDA through NVRTC, one CUDA graph)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--runs", opt->runs, "timed runs per kernel (--explain)")->check(CLI::Range(1, 1000000));
  cmd->callback([opt, &global] { run_compile(*opt, global); });
}

}  // namespace minigpt::cli
