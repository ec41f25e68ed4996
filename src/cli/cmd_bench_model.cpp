// `minigpt bench model [-m MODEL] [-o md|json|csv] [--runs N] [-t THREADS] [--no-peers] [--no-torch-compile]`:
// forward latency of GrammarMiniGPT at (B=2, T=16) and KV-cache decode throughput, with the
// PyTorch port's forward (eager and torch.compile) beside it, as a Report (machine, threads,
// build in its header).
//
// Forward: logits and probabilities, median of --runs timed calls after --warmup untimed ones,
// inputs drawn from seed 42 (never zeros). Decode: a full context (block_size tokens) fed one
// token at a time from an empty cache, tokens/s from the median time of one whole context.
// Model: -m if given, else the shipped model if present, else random weights of the default
// config with V = 600 (the table's "model" field says which).
// Peers: after our timing, bench/peers/torch_model.py --no-cpp runs as a child process with the
// same model file, -t, --runs, --warmup and shape, and its rows join the table with
// cpp_speedup = their median / our forward median. Our forward is timed while no torch
// process exists (peers.h); without torch the peer cells stay empty and a note says why.
// --device cuda: the same model on the GPU (bench_model_cuda.h: graph-replayed forward and decode
// timed with CUDA events, the host API by wall clock), and the peer with --device cuda (eager,
// torch.compile, torch.compile reduce-overhead), cpp_speedup against our graph forward.
#include "cli/bench_conditions.h"
#include "cli/bench_model_cuda.h"
#include "cli/device.h"
#include "cli/commands.h"
#include "cli/peers.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/report.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

struct BenchModelOptions {
  std::string model;
  std::string format = "md";
  int runs = 500;
  int warmup = 50;
  int batch = 2;
  int seq = 16;
  bool compile = false;                // also time our compiled forward (minigpt compile)
  std::string compile_mode = "default";
  bool compile_decode = false;         // also time our compiled decode step
  bool torch_compile = true;  // the peer also times torch.compile (its first call takes seconds to minutes)
  std::string device = "cpu";
  PeerOptions peers;
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::string description;  // the file's path, or how the weights were made
  bool from_file = false;
};

LoadedModel load_bench_model(const std::string& given) {
  std::string path;
  if (!given.empty()) {
    path = resolve_model_path(given);
  } else {
    try {
      path = resolve_model_path("");
    } catch (const Error&) {
      path.clear();  // no shipped model yet: random weights below
    }
  }
  if (!path.empty()) {
    ModelFile f = load_model(path);
    return {f.config, std::move(f.weights), std::filesystem::absolute(path).string(), true};
  }
  ModelConfig c;
  c.vocab_size = 600;
  return {c, ModelWeights::init_random(c, 42), "random weights (default config, V=600, seed 42)", false};
}

// The PyTorch port's rows (torch_model.py --no-cpp -o json: {"torch_version", "rows": [{"impl",
// "B", "T", "median_us", "runs"}], "notes"}), run now that our timing is over. `model` is the
// file we timed ("" for random weights: the script then makes its own, same config, V = 600).
void add_peer_rows(const BenchModelOptions& opt, const std::string& model, int threads, double cpp_us,
                   Report& report) {
  std::string args = fmt::format("{} --no-cpp --rounds 1 -o json -t {} --runs {} --warmup {} --batch {} --seq {}",
                                 peer_script("torch_model.py"), threads, opt.runs, opt.warmup, opt.batch, opt.seq);
  if (!model.empty()) args += " -m " + shell_quote(model);
  if (!opt.torch_compile) args += " --no-compile";
  if (is_cuda(opt.device)) args += " --device cuda";
  const auto answer = run_json(peer_command(opt.peers, args), "peers", report);
  if (!answer) return;
  report.set_meta("torch", peer_torch_version(*answer));
  for_each_peer_row(*answer, "rows", "peers", "a string impl, integer B, T and runs, a positive median_us", report,
                    [&](const nlohmann::json& r) {
                      const auto impl = json_string(r, "impl");
                      const auto b = json_int(r, "B"), t = json_int(r, "T"), runs = json_int(r, "runs");
                      const auto us = json_number(r, "median_us");
                      if (!impl || !b || !t || !runs || !us || !(*us > 0) || *b < 1 || *t < 1) return false;
                      // The first compiled call includes compilation: no rate, no ratio.
                      const bool first = impl->find("first call") != std::string::npos;
                      report.add_row({*impl, *b, *t, *us, first ? nlohmann::json() : nlohmann::json(*b * *t / *us * 1e6),
                                      *runs, first ? nlohmann::json() : nlohmann::json(*us / cpp_us)});
                      return true;
                    });
  report.add_note("cpp_speedup = the row's median / the C++ forward's median (> 1: the C++ forward is faster); "
                  "the peer ran as a child process after the C++ timing, on the same CPU set and thread count.");
}

// --device cuda: our GPU rows, then the peer's GPU rows.
void run_bench_model_cuda(const BenchModelOptions& opt, const GrammarMiniGPT& model, const LoadedModel& loaded,
                          const std::vector<int32_t>& ids, const std::vector<int32_t>& ctx, int threads) {
  const ReportFormat format = parse_report_format(opt.format);
  const ModelConfig& c = model.config();
  const int64_t B = opt.batch, T = opt.seq;
  const CudaModelTimes t = bench_model_cuda(model, ids, B, T, ctx, opt.runs, opt.warmup);
  Report report("GrammarMiniGPT forward and KV-cache decode (CUDA, fp32, CUDA graphs)",
                {"case", "B", "T", "median_us", "tokens_per_s", "runs", "cpp_speedup"}, threads);
  report.set_meta("model", loaded.description);
  report.set_meta("config", c.to_json());
  report.set_meta("gpu", t.gpu);
  auto tok = [&](double us) { return static_cast<double>(B * T) / us * 1e6; };
  for (const CudaTimeRow& row : t.rows) {
    if (row.decode)
      report.add_row({row.name, row.B, row.T, row.us, 1e6 / row.us, row.runs, nullptr});
    else
      report.add_row({row.name, row.B, row.T, row.us, tok(row.us), row.runs, row.us / t.forward_us});
  }
  report.add_note(fmt::format("max |logit GPU - CPU| at (B={}, T={}): {:.3g}", B, T, t.max_logit_diff));
  report.add_note("GPU rows: one graph launch between two CUDA events, waited for (launch latency included), "
                  "median of --runs after --warmup; weights stay in L2 (not flushed). Decode: block_size tokens "
                  "from an empty cache per run through CudaDecoder::step (wall clock), and the step's graph "
                  "alone at position 0. cpp_speedup here: the row's median / the first row's.");
  if (opt.peers.enabled) {
    add_peer_rows(opt, loaded.from_file ? loaded.description : "", threads, t.forward_us, report);
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }
  fmt::print("{}", report.render(format));
}

void run_bench_model(const BenchModelOptions& opt, const GlobalOptions& global) {
  const ReportFormat format = parse_report_format(opt.format);
  LoadedModel loaded = load_bench_model(opt.model);
  const GrammarMiniGPT model(loaded.config, std::move(loaded.weights));
  const ModelConfig& c = model.config();
  const int threads = global.resolved_threads();
  ThreadPool pool(threads);
  const int64_t B = opt.batch, T = opt.seq;
  MINIGPT_CHECK(T <= c.block_size, "--seq {} exceeds the model's block_size {}", T, c.block_size);

  std::mt19937_64 rng(42);
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
  std::vector<int32_t> ctx(static_cast<size_t>(c.block_size));  // the decode's context
  for (auto& id : ctx) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
  if (is_cuda(opt.device)) {
    MINIGPT_CHECK(!opt.compile && !opt.compile_decode, "bench model: --compile and --compile-decode are CPU-only");
    return run_bench_model_cuda(opt, model, loaded, ids, ctx, threads);
  }

  // forward (B, T): logits + probs
  const std::string load_at_start = loadavg();
  Tensor logits, probs;
  for (int i = 0; i < opt.warmup; ++i) model.forward(ids.data(), B, T, logits, probs, pool);
  std::vector<double> fwd_us;
  const CpuShare share(threads);
  for (int i = 0; i < opt.runs; ++i) {
    Timer timer;
    model.forward(ids.data(), B, T, logits, probs, pool);
    fwd_us.push_back(timer.elapsed_us());
  }
  const double fwd = median(fwd_us), fwd_share = share.share();

  // the compiled forward (minigpt compile), same ids, same pool, after its compile
  double cfwd = 0, compile_s = 0;
  if (opt.compile) {
    Timer ct;
    compile::CompileOptions co;
    co.mode = opt.compile_mode;
    compile::CompiledModel compiled(model, co);
    Tensor cl, cp;
    compiled.forward(ids.data(), B, T, cl, cp, pool);
    compile_s = ct.elapsed_s();
    for (int i = 0; i < opt.warmup; ++i) compiled.forward(ids.data(), B, T, cl, cp, pool);
    std::vector<double> us;
    for (int i = 0; i < opt.runs; ++i) {
      Timer timer;
      compiled.forward(ids.data(), B, T, cl, cp, pool);
      us.push_back(timer.elapsed_us());
    }
    cfwd = median(us);
  }

  // KV-cache decode: one whole context per timed run
  Decoder decoder(model);
  auto decode_all = [&] {
    decoder.reset();
    for (int32_t id : ctx) decoder.step(id, pool);
  };
  const int decode_runs = std::max(5, opt.runs / 10);
  for (int i = 0; i < std::max(2, opt.warmup / 10); ++i) decode_all();
  std::vector<double> dec_us;
  for (int i = 0; i < decode_runs; ++i) {
    Timer timer;
    decode_all();
    dec_us.push_back(timer.elapsed_us());
  }
  const double dec = median(dec_us) / static_cast<double>(c.block_size);  // per token

  // the compiled decode step: one graph for every position (compiled on first use, cached on disk)
  double cdec = 0;
  if (opt.compile_decode) {
    compile::CompileOptions co;
    co.mode = opt.compile_mode;
    compile::CompiledDecoder cdecoder(model, co);
    auto cdecode_all = [&] {
      cdecoder.reset();
      for (int32_t id : ctx) cdecoder.step(id, pool);
    };
    for (int i = 0; i < std::max(2, opt.warmup / 10); ++i) cdecode_all();  // the first compiles
    std::vector<double> us;
    for (int i = 0; i < decode_runs; ++i) {
      Timer timer;
      cdecode_all();
      us.push_back(timer.elapsed_us());
    }
    cdec = median(us) / static_cast<double>(c.block_size);
  }

  Report report("GrammarMiniGPT forward and KV-cache decode (CPU, fp32)",
                {"case", "B", "T", "median_us", "tokens_per_s", "runs", "cpp_speedup"}, threads);
  report.set_meta("model", loaded.description);
  report.set_meta("config", c.to_json());
  report.add_row({"forward (logits+probs)", B, T, fwd, static_cast<double>(B * T) / fwd * 1e6, opt.runs, 1.0});
  if (opt.compile) {  // cpp_speedup: eager / compiled, like the peers' their / ours
    report.add_row({fmt::format("forward compiled (minigpt compile, {})", opt.compile_mode), B, T, cfwd,
                    static_cast<double>(B * T) / cfwd * 1e6, opt.runs, cfwd / fwd});
    report.add_note(fmt::format("compiled forward: {:.2f}x eager at {} threads; first call (capture, passes, codegen, "
                                "JIT or cache hit) {:.3f} s", fwd / cfwd, threads, compile_s));
  }
  report.add_row({"kv decode, per token", 1, c.block_size, dec, 1e6 / dec, decode_runs, nullptr});
  if (opt.compile_decode) {
    report.add_row({fmt::format("kv decode compiled (minigpt compile, {}), per token", opt.compile_mode), 1, c.block_size, cdec,
                    1e6 / cdec, decode_runs, nullptr});
    report.add_note(fmt::format("compiled decode step: {:.2f}x eager at {} threads", dec / cdec, threads));
  }
  if (opt.peers.enabled) {
    add_peer_rows(opt, loaded.from_file ? loaded.description : "", threads, fwd, report);
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }
  report.add_note(fmt::format("forward: median of {} runs after {} warm-up; decode: {} tokens from an empty "
                              "cache per run, median of {} runs, us per token",
                              opt.runs, opt.warmup, c.block_size, decode_runs));
  report_conditions(report, load_at_start, fwd_share, "the timed forward runs");
  fmt::print("{}", report.render(format));
}

}  // namespace

void add_bench_model_command(CLI::App& bench, GlobalOptions& global) {
  auto opt = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench.add_subcommand("model", "Forward latency at (B=2, T=16) and KV-cache decode tokens/s");
  cmd->add_option("-m,--model", opt->model, "model file (default: the shipped model, else random weights)");
  cmd->add_option("-o,--output", opt->format, "md | json | csv")->check(CLI::IsMember({"md", "json", "csv"}));
  cmd->add_option("--runs", opt->runs, "timed forward calls")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", opt->warmup, "untimed forward calls first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--batch", opt->batch, "forward batch size B")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", opt->seq, "forward sequence length T")->check(CLI::Range(1, 8192));
  cmd->add_flag("--compile", opt->compile, "also time our compiled forward (minigpt compile), side by side");
  cmd->add_flag("--compile-decode", opt->compile_decode,
                "also time the compiled decode step (one graph for every position, read at run time: the "
                "first run compiles it, later runs load it from the JIT cache)");
  cmd->add_option("--compile-mode", opt->compile_mode, "default | max-autotune")
      ->check(CLI::IsMember({"default", "max-autotune"}));
  cmd->add_flag_callback("--no-torch-compile", [opt] { opt->torch_compile = false; },
                         "the peer skips torch.compile (its first call takes seconds to minutes)");
  add_device_option(cmd, opt->device);
  add_peer_options(cmd, opt->peers, "bench/peers/torch_model.py");
  cmd->callback([opt, &global] { run_bench_model(*opt, global); });
}

}  // namespace minigpt::cli
