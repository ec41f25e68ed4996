// `minigpt train`: trains the grammar MiniGPT on the grammar corpus, on the CPU or, with
// --device cuda, on one GPU (train/cuda_train_step.h; same recipe, batches and checkpoints).
//
// Defaults are the shipped recipe (TrainOptions): `minigpt train --seed 42` writes
// models/grammar-minigpt.safetensors. A progress bar on a terminal (stdout is a tty), plain
// log lines otherwise. --checkpoint PATH saves the whole training state atomically every
// --checkpoint-every steps and at the end; --resume PATH continues such a checkpoint with the
// same per-step losses, bit for bit, as an uninterrupted run at the same thread count.
//
// Data parallel: `mpirun -np N minigpt train --dist mpi ...` trains on N CPU ranks, and
// `mpirun -np N minigpt train --device cuda --dist nccl ...` on N GPUs, one per rank (--batch is
// the global batch; train/trainer.h, train/cuda_data_parallel.h). Rank 0 alone prints,
// evaluates and writes the checkpoints and the model; an error on any rank ends every rank
// (dist/communicator.h).
#include "cli/commands.h"
#include "cli/device.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "data/corpus.h"
#include "dist/communicator.h"
#include "dist/local_ranks.h"
#include "model/cuda/cuda_gpt.h"
#include "model/model_file.h"
#include "train/checkpoint.h"
#include "train/corpus_streams.h"
#include "train/progress.h"
#include "train/trainer.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <numeric>

namespace minigpt::cli {

namespace {

struct TrainArgs {
  TrainOptions recipe;
  std::string output = kDefaultModel;
  std::string checkpoint;
  std::string resume;
  int64_t checkpoint_every = 500;
  int64_t eval_every = 500;
  int64_t log_every = 100;
  std::string dist = "single";
  std::string device = "cpu";
  double dist_timeout = 30.0;
  int gpus = 0;  // --gpus N: start N local GPU ranks over NCCL (dist/local_ranks.h); 0: not asked  // a hung rank is then named and every rank ended well within 60 s
};

void run_train_on(dist::Communicator& comm, const TrainArgs& args, const CLI::App& cmd,
                  const GlobalOptions& global) {
  const int threads = global.resolved_threads();
  ThreadPool pool(threads);
  Timer wall;
  const Device device = is_cuda(args.device) ? Device::CUDA : Device::CPU;

  std::unique_ptr<Trainer> trainer;
  std::string checkpoint_path = args.checkpoint;
  if (!args.resume.empty()) {
    // The recipe comes from the checkpoint: a changed schedule or corpus could not reproduce
    // the uninterrupted run, so recipe flags next to --resume are refused rather than ignored.
    for (const char* flag : {"--seed", "--steps", "--batch", "--seq", "--lr", "--min-lr", "--warmup",
                             "--weight-decay", "--clip", "--corpus-tokens", "--layers", "--d-model",
                             "--heads"})
      MINIGPT_CHECK(cmd.count(flag) == 0,
                    "{} cannot be combined with --resume: the checkpoint's recipe is continued", flag);
    TrainCheckpoint c = load_checkpoint(args.resume);
    const Tokenizer tokenizer(c.vocab);
    CorpusStreams streams = make_corpus_streams(c.options, tokenizer);
    fmt::print("resuming '{}' at step {}/{}\n", args.resume, c.step, c.options.steps);
    trainer = std::make_unique<Trainer>(std::move(c), streams.train, streams.val, &comm, device);
    if (checkpoint_path.empty()) checkpoint_path = args.resume;
  } else {
    std::vector<std::string> vocab = data::corpus_vocabulary();
    TrainOptions options = args.recipe;
    options.model.vocab_size = static_cast<int>(vocab.size());
    options.model.block_size = std::max<int>(options.model.block_size, static_cast<int>(options.seq));
    options.validate();
    const Tokenizer tokenizer(vocab);
    Timer corpus_timer;
    CorpusStreams streams = make_corpus_streams(options, tokenizer);
    fmt::print("corpus: {} training tokens (seed {}), {} held-out tokens (seed {}) in {:.1f} s\n",
               streams.train->size(), options.seed, streams.val->size(), options.val_seed(),
               corpus_timer.elapsed_s());
    trainer = std::make_unique<Trainer>(options, std::move(vocab), streams.train, streams.val, &comm, device);
  }
  // The output's folder (models/ in a fresh checkout) is made before training, so that an
  // unusable path fails now and not after the run.
  const std::filesystem::path parent = std::filesystem::path(args.output).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  MINIGPT_CHECK(!ec, "-o {}: cannot create the folder '{}': {}", args.output, parent.string(), ec.message());
  const TrainOptions& o = trainer->options();
  fmt::print("model: {} layers, {} heads, d_model {}, vocab {}, {} parameters\n", o.model.n_layer,
             o.model.n_head, o.model.d_model, o.model.vocab_size, o.model.parameter_count());
  fmt::print("recipe: steps {}, batch {}, seq {}, lr {:g} -> {:g} (warm-up {}, cosine), AdamW "
             "b1 {:g} b2 {:g} wd {:g}, clip {:g}, {} threads\n",
             o.steps, o.batch, o.seq, o.lr, o.min_lr, o.warmup, o.adamw.beta1, o.adamw.beta2,
             o.adamw.weight_decay, o.grad_clip, threads);
  if (device == Device::CUDA)
    fmt::print("device: cuda (the whole step as one CUDA graph; {:.1f} MiB arena)\n",
               static_cast<double>(trainer->cuda_step()->arena_bytes()) / (1 << 20));
  if (comm.size() > 1)
    fmt::print("data parallel: {} ranks ({}), {} sequences per rank, {} threads each\n", comm.size(),
               comm.name(), trainer->local_batch(), threads);
  if (trainer->done()) fmt::print("the checkpoint has finished all {} steps\n", o.steps);

  const bool terminal = ::isatty(::fileno(stdout)) != 0;
  ProgressDisplay progress(stdout, terminal, trainer->step(), o.steps, trainer->tokens_per_step(),
                           args.log_every);
  std::deque<float> recent;  // the last 100 losses, for the summary
  LoopOptions loop;
  loop.eval_every = args.eval_every;
  loop.checkpoint_path = checkpoint_path;
  loop.checkpoint_every = checkpoint_path.empty() ? 0 : args.checkpoint_every;
  std::optional<float> last_val;
  LoopHooks hooks;
  hooks.on_step = [&](const StepStats& s) {
    progress.step(s);
    recent.push_back(s.loss);
    if (recent.size() > 100) recent.pop_front();
  };
  hooks.on_eval = [&](int64_t step, float loss) {
    last_val = loss;
    progress.eval(step, loss);
  };
  hooks.on_checkpoint = [&](int64_t step, const std::string& path) {
    if (!terminal || step == o.steps) progress.note(fmt::format("checkpoint  step {}  -> {}", step, path));
  };
  run_training(*trainer, loop, hooks, pool);
  progress.finish();

  if (!comm.is_root()) return;  // rank 0 writes the model (its folder was made before training)
  save_model(args.output, trainer->model_file());
  const double train_loss =
      recent.empty() ? 0.0 : std::accumulate(recent.begin(), recent.end(), 0.0) / static_cast<double>(recent.size());
  fmt::print("done: {} steps, train loss {:.4f} (mean of the last {}){}, {:.1f}k tokens/s, "
             "training {}, wall {}\n",
             trainer->step(), train_loss, recent.size(),
             last_val ? fmt::format(", val loss {:.4f}", *last_val) : "",
             progress.tokens_per_second() / 1e3, format_duration(progress.elapsed_s()),
             format_duration(wall.elapsed_s()));
  fmt::print("wrote '{}' (peak resident memory {:.1f} MiB)\n", args.output, process_peak_rss_mib());
}

void run_train(const TrainArgs& args, const CLI::App& cmd, const GlobalOptions& global) {
  // GPU ranks reduce over NCCL, CPU ranks over MPI; each engine reduces only its own buffers.
  MINIGPT_CHECK(args.dist != "nccl" || is_cuda(args.device),
                "train --dist nccl trains on GPUs: add --device cuda (or use --dist mpi on the CPU)");
  MINIGPT_CHECK(args.dist != "mpi" || !is_cuda(args.device),
                "train --device cuda --dist mpi: GPU ranks reduce their gradients over NCCL; use --dist nccl");
  if (is_cuda(args.device))  // before the corpus is generated: fail in milliseconds
    MINIGPT_CHECK(cuda_model_available(), "train --device cuda: {}", cuda_model_unavailable_reason());
  dist::start_local_ranks_if_asked(global.argv, args.gpus, is_cuda(args.device), "train");  // N > 1: does not return
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(args.dist, args.dist_timeout);
  // Ranks other than 0 print nothing (errors still reach stderr).
  if (!comm->is_root()) MINIGPT_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "cannot silence stdout");
  try {
    run_train_on(*comm, args, cmd, global);
    comm->barrier();  // nobody finalises while another rank still needs it
  } catch (const std::exception& e) {
    if (comm->size() > 1) comm->abort(e.what());
    throw;
  }
}

}  // namespace

void add_train_command(CLI::App& app, GlobalOptions& global) {
  auto args = std::make_shared<TrainArgs>();
  TrainOptions& r = args->recipe;
  CLI::App* cmd = app.add_subcommand("train", "Train the grammar MiniGPT on the grammar corpus (CPU or one GPU)");
  cmd->add_option("-s,--seed", r.seed, "Seed of the weights, the corpus and the batches")->capture_default_str();
  cmd->add_option("--steps", r.steps, "Optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--batch", r.batch, "Sequences per batch")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", r.seq, "Tokens per sequence (the context grows to it past 64)")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--layers", r.model.n_layer, "Transformer blocks")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--d-model", r.model.d_model, "Model width")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--heads", r.model.n_head, "Attention heads (must divide --d-model)")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--lr", r.lr, "Peak learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--min-lr", r.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  cmd->add_option("--warmup", r.warmup, "Linear warm-up steps")->capture_default_str();
  cmd->add_option("--weight-decay", r.adamw.weight_decay, "AdamW decoupled weight decay (matrices and embeddings only)")->capture_default_str();
  cmd->add_option("--clip", r.grad_clip, "Global gradient-norm clip (0: off)")->capture_default_str();
  cmd->add_option("--corpus-tokens", r.corpus_tokens, "Training corpus size in tokens (whole sentences)")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Model file to write (.safetensors)")->capture_default_str();
  cmd->add_option("--checkpoint", args->checkpoint, "Checkpoint file, written atomically");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "Steps between checkpoints")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--resume", args->resume, "Continue a checkpoint (its recipe; bitwise the same losses at the same -t)");
  cmd->add_option("--eval-every", args->eval_every, "Steps between held-out evaluations (0: never)")->capture_default_str();
  cmd->add_option("--log-every", args->log_every, "Steps between log lines when stdout is not a terminal")->capture_default_str()->check(CLI::PositiveNumber);
  add_device_option(cmd, args->device);
  cmd->add_option("--dist", args->dist, "Data parallel engine: single (one process), mpi (CPU ranks under mpirun) or nccl (GPU ranks under mpirun, with --device cuda)")->capture_default_str()->check(CLI::IsMember({"single", "mpi", "nccl"}));
  cmd->add_option("--gpus", args->gpus, "With --device cuda: train on N local GPUs, one rank each over NCCL, started by this command (mpirun underneath)")->check(CLI::Range(1, 64));
  cmd->add_option("--dist-timeout", args->dist_timeout, "Seconds a rank waits in a collective before aborting every rank")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([args, cmd, &global] { run_train(*args, *cmd, global); });
}

}  // namespace minigpt::cli
