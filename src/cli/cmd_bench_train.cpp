// `minigpt bench train`: the training step's throughput at B = 64, T = 16 (the issue's
// measuring point), as a Report (markdown, JSON or CSV).
//
// What is timed: Trainer::train_step, the whole update: zero the gradients, draw the batch,
// forward_train, backward, global-norm clip, AdamW. --warmup untimed steps first (the first
// step allocates the saved activations), then --steps timed ones; the median and the minimum
// are reported with tokens/s = B*T / median. Data: the grammar corpus (seed --seed), the
// shipped model's architecture and AdamW settings (TrainOptions defaults).
// The PyTorch peer (bench/peers/torch_train.py) runs this command with -o json and prints both
// in one table with the ratio.
#include "cli/commands.h"
#include "core/error.h"
#include "core/report.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "data/corpus.h"
#include "train/corpus_streams.h"
#include "train/progress.h"
#include "train/trainer.h"

#include <fmt/format.h>

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
};


void run_bench_train(const BenchTrainArgs& a, const GlobalOptions& global) {
  const ReportFormat format = parse_report_format(a.format);
  const int threads = global.resolved_threads();
  ThreadPool pool(threads);

  std::vector<std::string> vocab = data::corpus_vocabulary();
  TrainOptions o;
  o.seed = a.seed;
  o.batch = a.batch;
  o.seq = a.seq;
  o.steps = a.warmup + a.steps;
  o.warmup = std::min<int64_t>(o.warmup, o.steps);
  o.corpus_tokens = a.corpus_tokens;
  o.val_tokens = 1;  // no evaluation here
  o.model.vocab_size = static_cast<int>(vocab.size());
  o.validate();
  const Tokenizer tokenizer(vocab);
  CorpusStreams streams = make_corpus_streams(o, tokenizer);
  Trainer trainer(o, std::move(vocab), streams.train, nullptr);

  for (int64_t i = 0; i < a.warmup; ++i) trainer.train_step(pool);
  std::vector<double> ms;
  float first_loss = 0.0f, last_loss = 0.0f;
  Timer total;
  for (int64_t i = 0; i < a.steps; ++i) {
    const StepStats s = trainer.train_step(pool);
    ms.push_back(s.seconds * 1e3);
    if (i == 0) first_loss = s.loss;
    last_loss = s.loss;
  }
  const double wall_s = total.elapsed_s();
  const double med = median(ms);
  const double tokens = static_cast<double>(a.batch * a.seq);

  Report report("GrammarMiniGPT training step (CPU, fp32, AdamW)",
                {"impl", "B", "T", "threads", "median_ms", "min_ms", "tokens_per_s", "steps"}, threads);
  report.set_meta("parameters", o.model.parameter_count());
  report.set_meta("vocab_size", o.model.vocab_size);
  report.set_meta("step", "zero grads + batch + forward_train + backward + clip 1.0 + AdamW (wd 0.1 on matrices)");
  report.set_meta("warmup_steps", a.warmup);
  report.set_meta("peak_rss_mib", std::round(process_peak_rss_mib() * 10.0) / 10.0);
  report.add_row({"minigpt C++", a.batch, a.seq, threads, med, *std::min_element(ms.begin(), ms.end()),
                  tokens / (med / 1e3), a.steps});
  report.add_note(fmt::format("Mean over the timed steps: {:.3f} ms/step, {:.0f} tokens/s; loss {:.3f} -> {:.3f}.",
                              wall_s * 1e3 / static_cast<double>(a.steps),
                              tokens * static_cast<double>(a.steps) / wall_s, first_loss, last_loss));
  report.add_note("Peer: bench/peers/torch_train.py runs the PyTorch port's eager step beside this one.");
  fmt::print("{}", report.render(format));
}

}  // namespace

void add_bench_train_command(CLI::App& bench, GlobalOptions& global) {
  auto a = std::make_shared<BenchTrainArgs>();
  CLI::App* cmd = bench.add_subcommand("train", "Training-step throughput (tokens/s) at B=64, T=16");
  cmd->add_option("-B,--batch", a->batch, "Sequences per batch")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("-T,--seq", a->seq, "Tokens per sequence")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--steps", a->steps, "Timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->warmup, "Untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("-s,--seed", a->seed, "Seed of the weights and the corpus")->capture_default_str();
  cmd->add_option("-o,--output", a->format, "md | json | csv")->capture_default_str();
  cmd->callback([a, &global] { run_bench_train(*a, global); });
}

}  // namespace minigpt::cli
