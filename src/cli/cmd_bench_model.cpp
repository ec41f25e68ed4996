// `minigpt bench model [-m MODEL] [-o md|json|csv] [--runs N] [-t THREADS] [--no-peers] [--no-torch-compile]`:
// forward latency of GrammarMiniGPT at (B=2, T=16) and KV-cache decode throughput, with the
// PyTorch port's forward (eager and torch.compile) beside it, as a Report (machine, threads,
// build in its header).
//
// Forward: logits and probabilities, median of --runs timed calls after --warmup untimed ones,
// inputs drawn from seed 42 (never zeros). Decode: a full context (block_size tokens) fed one
// token at a time from an empty cache, tokens/s from the median time of one whole context.
// --compile / --compile-decode: the compiled forward / decode step timed in the same loop as the
// eager one, alternating (blocks of 10 forward calls after one untimed one; decode by whole contexts), so their ratio is taken
// from one stretch of time; the notes give the quartiles of the block-by-block ratios.
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

#include <algorithm>
#include <filesystem>
#include <memory>
#include <type_traits>
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

// Two calls timed in turn: one untimed call of a then `block` timed ones, the same for b, until
// each has `runs` samples (b null: a alone). Interleaving puts both sample sets in the same stretch of
// time, so their ratio survives a drifting machine better than two runs one after the other.
struct Interleaved {
  std::vector<double> a, b;  // us per call, in the order taken
};
constexpr int kForwardBlock = 10;

template <class A, class B>
Interleaved time_interleaved(A&& a, B&& b, int runs, int block) {
  Interleaved r;
  r.a.reserve(static_cast<size_t>(runs));
  r.b.reserve(static_cast<size_t>(runs));
  auto timed = [](auto& fn, std::vector<double>& out, int n) {
    for (int i = 0; i < n; ++i) {
      Timer timer;
      fn();
      out.push_back(timer.elapsed_us());
    }
  };
  for (int done = 0; done < runs; done += block) {
    const int n = std::min(block, runs - done);
    a();  // untimed: brings a's weights back into the caches b's block used
    timed(a, r.a, n);
    if constexpr (!std::is_same_v<std::decay_t<B>, std::nullptr_t>) {
      b();
      timed(b, r.b, n);
    }
  }
  return r;
}

// "q1 / median / q3" of a's block median over b's block median, block by block.
std::string ratio_quartiles(const Interleaved& t, int block) {
  std::vector<double> ratios;
  for (size_t i = 0; i + static_cast<size_t>(block) <= std::min(t.a.size(), t.b.size()); i += static_cast<size_t>(block)) {
    const auto blk = [&](const std::vector<double>& v) {
      return median(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(i),
                                        v.begin() + static_cast<std::ptrdiff_t>(i) + block));
    };
    ratios.push_back(blk(t.a) / blk(t.b));
  }
  if (ratios.empty()) return "-";
  std::sort(ratios.begin(), ratios.end());
  const auto at = [&](double q) { return ratios[static_cast<size_t>(q * static_cast<double>(ratios.size() - 1))]; };
  return fmt::format("{:.2f} / {:.2f} / {:.2f}", at(0.25), at(0.5), at(0.75));
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

  // forward (B, T): logits + probs. With --compile, eager and compiled calls alternate in blocks
  // (time_interleaved): both sample sets come from the same stretch of time, so the ratio holds
  // when the machine's speed drifts (other processes, the shared caches).
  const std::string load_at_start = loadavg();
  Tensor logits, probs;
  auto eager_forward = [&] { model.forward(ids.data(), B, T, logits, probs, pool); };
  std::unique_ptr<compile::CompiledModel> compiled;
  Tensor cl, cp;
  double compile_s = 0;
  if (opt.compile) {
    Timer ct;
    compile::CompileOptions co;
    co.mode = opt.compile_mode;
    compiled = std::make_unique<compile::CompiledModel>(model, co);
    compiled->forward(ids.data(), B, T, cl, cp, pool);
    compile_s = ct.elapsed_s();
  }
  auto compiled_forward = [&] { compiled->forward(ids.data(), B, T, cl, cp, pool); };
  for (int i = 0; i < opt.warmup; ++i) {
    eager_forward();
    if (compiled) compiled_forward();
  }
  const CpuShare share(threads);
  const Interleaved fwd_t = compiled ? time_interleaved(eager_forward, compiled_forward, opt.runs, kForwardBlock)
                                     : time_interleaved(eager_forward, nullptr, opt.runs, kForwardBlock);
  const double fwd = median(fwd_t.a), cfwd = compiled ? median(fwd_t.b) : 0, fwd_share = share.share();

  // KV-cache decode: a whole context (block_size tokens from an empty cache) per run, each step
  // timed; per token = the sum over positions of each position's median step time, over the
  // block size (a median per position keeps a step that lost its core out of the figure, as the
  // forward's median does; the steps' cost grows with the position). With --compile-decode (one
  // graph for every position: compiled on first use, cached on disk) eager and compiled contexts
  // alternate, so both sample sets come from the same stretch of time. Not token by token: each
  // step reads all the weights (~1 MiB, in L2 when one decoder runs alone), and two decoders'
  // weights alternating step by step would both be timed out of L3.
  Decoder decoder(model);
  std::unique_ptr<compile::CompiledDecoder> cdecoder;
  if (opt.compile_decode) {
    compile::CompileOptions co;
    co.mode = opt.compile_mode;
    cdecoder = std::make_unique<compile::CompiledDecoder>(model, co);
  }
  const size_t n_pos = ctx.size();
  std::vector<std::vector<double>> eager_steps(n_pos), compiled_steps(n_pos);  // [position][run], us
  // One context, each step timed into `steps` (null: untimed). One untimed step first brings
  // this decoder's weights back into the caches the other decoder's context used.
  auto decode_context = [&](auto& dec, std::vector<std::vector<double>>* steps) {
    dec.reset();
    dec.step(ctx[0], pool);
    dec.reset();
    for (size_t p = 0; p < n_pos; ++p) {
      Timer t;
      dec.step(ctx[p], pool);
      if (steps) (*steps)[p].push_back(t.elapsed_us());
    }
  };
  const int decode_runs = std::max(5, opt.runs / 10);
  for (int i = 0; i < std::max(2, opt.warmup / 10); ++i) {  // the compiled decoder's first compiles
    decode_context(decoder, nullptr);
    if (cdecoder) decode_context(*cdecoder, nullptr);
  }
  for (int i = 0; i < decode_runs; ++i) {
    decode_context(decoder, &eager_steps);
    if (cdecoder) decode_context(*cdecoder, &compiled_steps);
  }
  auto per_token = [&](const std::vector<std::vector<double>>& steps) {
    double sum = 0;
    for (const auto& at_p : steps) sum += median(at_p);
    return sum / static_cast<double>(n_pos);
  };
  const double dec = per_token(eager_steps);
  const double cdec = cdecoder ? per_token(compiled_steps) : 0;
  // eager / compiled at a few positions, to show how the ratio moves along the context
  std::string dec_positions;
  if (cdecoder)
    for (size_t p : {size_t{0}, n_pos / 2, n_pos - 1})
      dec_positions += fmt::format("{}{}: {:.2f}", dec_positions.empty() ? "" : ", ", p,
                                   median(eager_steps[p]) / median(compiled_steps[p]));

  Report report("GrammarMiniGPT forward and KV-cache decode (CPU, fp32)",
                {"case", "B", "T", "median_us", "tokens_per_s", "runs", "cpp_speedup"}, threads);
  report.set_meta("model", loaded.description);
  report.set_meta("config", c.to_json());
  report.add_row({"forward (logits+probs)", B, T, fwd, static_cast<double>(B * T) / fwd * 1e6, opt.runs, 1.0});
  if (opt.compile) {  // cpp_speedup: eager / compiled, like the peers' their / ours
    report.add_row({fmt::format("forward compiled (minigpt compile, {})", opt.compile_mode), B, T, cfwd,
                    static_cast<double>(B * T) / cfwd * 1e6, opt.runs, cfwd / fwd});
    report.add_note(fmt::format("compiled forward: {:.2f}x eager at {} threads (eager and compiled interleaved in "
                                "blocks of {} calls; per-block ratio quartiles {}); first call (capture, passes, "
                                "codegen, JIT or cache hit) {:.3f} s",
                                fwd / cfwd, threads, kForwardBlock, ratio_quartiles(fwd_t, kForwardBlock), compile_s));
  }
  report.add_row({"kv decode, per token", 1, c.block_size, dec, 1e6 / dec, decode_runs, nullptr});
  if (opt.compile_decode) {
    report.add_row({fmt::format("kv decode compiled (minigpt compile, {}), per token", opt.compile_mode), 1, c.block_size, cdec,
                    1e6 / cdec, decode_runs, nullptr});
    report.add_note(fmt::format("compiled decode step: {:.2f}x eager at {} threads (eager and compiled contexts "
                                "alternate; eager/compiled at positions {})",
                                dec / cdec, threads, dec_positions));
  }
  if (opt.peers.enabled) {
    add_peer_rows(opt, loaded.from_file ? loaded.description : "", threads, fwd, report);
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }
  report.add_note(fmt::format("forward: median of {} runs after {} warm-up; decode: {} tokens from an empty "
                              "cache per run, {} runs, us per token = the mean over positions of each "
                              "position's median step",
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
