// `minigpt bench train`: the training step's throughput at B = 64, T = 16 (the issue's
// measuring point), as a Report (markdown, JSON or CSV).
//
// What is timed: Trainer::train_step, the whole update: zero the gradients, draw the batch,
// forward_train, backward, global-norm clip, AdamW. --warmup untimed steps first (the first
// step allocates the saved activations), then --steps timed ones; the median and the minimum
// are reported with tokens/s = B*T / median. Data: the grammar corpus (seed --seed), the
// shipped model's architecture and AdamW settings (TrainOptions defaults).
// Peer: after our timing, bench/peers/torch_train.py --no-cpp (the PyTorch port's eager step,
// same B, T, -t, --steps, --warmup and vocabulary size) runs as a child process and its row
// joins the table with cpp_speedup = its median / ours; without torch the cells stay empty
// and a note says why (peers.h). Run alone, torch_train.py alternates the two sides in rounds.
//
// --device cuda: the same Trainer on the GPU (train/cuda_train_step.h: the whole step as one
// CUDA graph). The timed figure is the graph's GPU time per step (CUDA events around each
// replay, median); the wall time per step (with the host's batch sampling, the copies and the
// wait) is reported beside it. The peer then runs torch_train.py --device cuda.
#include "cli/bench_conditions.h"
#include "cli/bench_train_dist.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/peers.h"
#include "core/error.h"
#include "core/report.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "data/corpus.h"
#include "dist/local_ranks.h"
#include "model/cuda/cuda_gpt.h"
#include "train/corpus_streams.h"
#include "train/progress.h"
#include "train/trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <memory>

namespace minigpt::cli {

namespace {

struct BenchTrainArgs {
  int64_t batch = 64;
  int64_t seq = 16;
  int64_t steps = 30;
  int64_t warmup = 5;
  uint64_t seed = 42;
  int64_t corpus_tokens = 200'000;
  std::string format = "md";
  std::string device = "cpu";
  PeerOptions peers;
  DistBenchArgs dist;  // --dist: the data-parallel step instead (bench_train_dist.cpp)
  int gpus = 0;        // --gpus N: the NCCL step on N local GPUs, ranks started here (dist/local_ranks.h)
};

// The PyTorch port's step (torch_train.py --no-cpp -o json: {"torch_version", "rows": [{"impl",
// "B", "T", "threads", "median_ms", "tokens_per_s", "steps"}], "notes"}), run after our timing.
void add_peer_rows(const BenchTrainArgs& a, int threads, int vocab_size, double cpp_ms, Report& report) {
  const std::string args = fmt::format("{} --no-cpp -o json -t {} -B {} -T {} --steps {} --warmup {} --rounds 1 "
                                       "--vocab-size {} --device {}", peer_script("torch_train.py"), threads, a.batch,
                                       a.seq, a.steps, a.warmup, vocab_size, a.device);
  const auto answer = run_json(peer_command(a.peers, args), "peers", report);
  if (!answer) return;
  report.set_meta("torch", peer_torch_version(*answer));
  for_each_peer_row(*answer, "rows", "peers", "a string impl, integer threads and steps, a positive median_ms",
                    report, [&](const nlohmann::json& r) {
                      const auto impl = json_string(r, "impl");
                      const auto t = json_int(r, "threads"), steps = json_int(r, "steps");
                      const auto ms = json_number(r, "median_ms");
                      if (!impl || !t || !steps || !ms || !(*ms > 0)) return false;
                      report.add_row({*impl, a.batch, a.seq, *t, *ms, nullptr,
                                      static_cast<double>(a.batch * a.seq) / (*ms / 1e3), *steps, *ms / cpp_ms});
                      return true;
                    });
  report.add_note("cpp_speedup = the row's median ms / the C++ step's median ms (> 1: the C++ step is faster); "
                  "the peer ran as a child process after the C++ timing, on the same CPU set and thread count.");
}


void run_bench_train(const BenchTrainArgs& a, const GlobalOptions& global) {
  const ReportFormat format = parse_report_format(a.format);
  const int threads = global.resolved_threads();
  ThreadPool pool(threads);

  std::vector<std::string> vocab = data::corpus_vocabulary();
  TrainOptions o = bench_train_options(a.seed, a.batch, a.seq, a.steps, a.warmup, a.corpus_tokens,
                                       static_cast<int>(vocab.size()));
  o.validate();
  const Tokenizer tokenizer(vocab);
  CorpusStreams streams = make_corpus_streams(o, tokenizer);
  const bool cuda = is_cuda(a.device);
  Trainer trainer(o, std::move(vocab), streams.train, nullptr, nullptr, cuda ? Device::CUDA : Device::CPU);

  const std::string load_at_start = loadavg();
  for (int64_t i = 0; i < a.warmup; ++i) trainer.train_step(pool);
  const CpuShare share(threads);
  std::vector<double> ms, wall_ms;  // ms: the figure timed (CPU: wall; CUDA: the graph on the GPU)
  float first_loss = 0.0f, last_loss = 0.0f;
  Timer total;
  for (int64_t i = 0; i < a.steps; ++i) {
    const StepStats s = trainer.train_step(pool);
    ms.push_back((cuda ? s.backward_s : s.seconds) * 1e3);
    wall_ms.push_back(s.seconds * 1e3);
    if (i == 0) first_loss = s.loss;
    last_loss = s.loss;
  }
  const double wall_s = total.elapsed_s(), step_share = share.share();
  const double med = median(ms);
  const double tokens = static_cast<double>(a.batch * a.seq);

  Report report(cuda ? "GrammarMiniGPT training step (CUDA, fp32, AdamW, one CUDA graph per step)"
                     : "GrammarMiniGPT training step (CPU, fp32, AdamW)",
                {"impl", "B", "T", "threads", "median_ms", "min_ms", "tokens_per_s", "steps", "cpp_speedup"}, threads);
  if (cuda) {
    CudaTrainStep& step = *trainer.cuda_step();
    report.set_meta("device", "cuda");
    report.set_meta("graph_nodes", step.graph_nodes());
    report.set_meta("arena_mib", std::round(static_cast<double>(step.arena_bytes()) / (1 << 20) * 10.0) / 10.0);
    // after the timed steps: the optimizer phase updates the weights again
    std::string phases;
    for (const CudaTrainStep::PhaseTime& p : step.profile_phases(100))
      phases += fmt::format("{}{} {:.1f} us ({} nodes)", phases.empty() ? "" : ", ", p.phase, p.us, p.nodes);
    report.set_meta("phases (each its own graph, 100 replays)", phases);
    report.add_note(fmt::format("CUDA: median_ms is the graph's GPU time per step (CUDA events around each replay); "
                                "the wall time per step with the host's batch sampling, copies and wait is {:.4f} ms "
                                "median ({:.0f} tokens/s). Goal (issue 14): >= 2e6 tokens/s, a step <= 0.512 ms.",
                                median(wall_ms), tokens / (median(wall_ms) / 1e3)));
  }
  report.set_meta("parameters", o.model.parameter_count());
  report.set_meta("vocab_size", o.model.vocab_size);
  report.set_meta("step", "zero grads + batch + forward_train + backward + clip 1.0 + AdamW (wd 0.1 on matrices)");
  report.set_meta("warmup_steps", a.warmup);
  report.set_meta("peak_rss_mib", std::round(process_peak_rss_mib() * 10.0) / 10.0);
  report.add_row({cuda ? "minigpt CUDA graph" : "minigpt C++", a.batch, a.seq, threads, med, *std::min_element(ms.begin(), ms.end()),
                  tokens / (med / 1e3), a.steps, 1.0});
  report.add_note(fmt::format("Mean over the timed steps: {:.3f} ms/step, {:.0f} tokens/s; loss {:.3f} -> {:.3f}.",
                              wall_s * 1e3 / static_cast<double>(a.steps),
                              tokens * static_cast<double>(a.steps) / wall_s, first_loss, last_loss));
  report_conditions(report, load_at_start, step_share, "the timed steps");
  if (a.peers.enabled) {
    add_peer_rows(a, threads, o.model.vocab_size, med, report);
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }
  fmt::print("{}", report.render(format));
}

}  // namespace

void add_bench_train_command(CLI::App& bench, GlobalOptions& global) {
  auto a = std::make_shared<BenchTrainArgs>();
  CLI::App* cmd = bench.add_subcommand("train", "Training-step throughput (tokens/s) at B=64, T=16");
  cmd->add_option("-B,--batch", a->batch, "Sequences per batch")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("-T,--seq", a->seq, "Tokens per sequence")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--steps", a->steps, "Timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->warmup, "Untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("-s,--seed", a->seed, "Seed of the weights and the corpus")->capture_default_str();
  cmd->add_option("-o,--output", a->format, "md | json | csv")->capture_default_str();
  add_device_option(cmd, a->device);
  add_peer_options(cmd, a->peers, "bench/peers/torch_train.py");
  cmd->add_option("--dist", a->dist.dist, "Data-parallel step instead: single (1 rank), mpi (CPU ranks under mpirun) or nccl (GPU ranks under mpirun, with --device cuda)")->check(CLI::IsMember({"single", "mpi", "nccl"}));
  cmd->add_option("--layers", a->dist.layers, "With --dist: transformer blocks")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--d-model", a->dist.d_model, "With --dist: model width")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--heads", a->dist.heads, "With --dist: attention heads")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--gpus", a->gpus, "With --device cuda: the data-parallel step on N local GPUs over NCCL, ranks started by this command (mpirun underneath)")->check(CLI::Range(1, 64));
  cmd->callback([a, &global] {
    if (a->gpus > 0) {
      if (is_cuda(a->device))
        MINIGPT_CHECK(cuda_model_available(), "bench train --device cuda: {}", cuda_model_unavailable_reason());
      dist::start_local_ranks_if_asked(global.argv, a->gpus, is_cuda(a->device), "bench train");  // N > 1: no return
      a->dist.dist = "nccl";  // one GPU: the same step as one rank of N
    }
    if (a->dist.dist.empty()) return run_bench_train(*a, global);
    MINIGPT_CHECK(a->dist.dist != "nccl" || is_cuda(a->device), "bench train --dist nccl: add --device cuda");
    MINIGPT_CHECK(a->dist.dist != "mpi" || !is_cuda(a->device),
                  "bench train --device cuda --dist mpi: GPU ranks reduce over NCCL; use --dist nccl");
    if (is_cuda(a->device))  // before the corpus is generated
      MINIGPT_CHECK(cuda_model_available(), "bench train --device cuda: {}", cuda_model_unavailable_reason());
    DistBenchArgs d = a->dist;  // the shared options, with --batch as the global batch
    d.device = a->device;
    d.batch = a->batch;
    d.seq = a->seq;
    d.steps = a->steps;
    d.warmup = a->warmup;
    d.seed = a->seed;
    d.corpus_tokens = a->corpus_tokens;
    d.format = a->format;
    run_bench_train_dist(d, global);
  });
}

}  // namespace minigpt::cli
