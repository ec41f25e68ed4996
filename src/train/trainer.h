// Trainer: one GrammarMiniGPT, its AdamW state and its batch sampler, stepped one update at a
// time; run_training() drives it with held-out evaluation and periodic checkpoints.
//
// A step: zero the gradients, draw a batch (B, T), forward_train + backward, clip the global
// gradient norm, AdamW at the scheduled lr. Every piece is deterministic for the options and
// the thread count (ThreadPool uses fixed chunks), so two runs, or a run and its resumption
// from a checkpoint, produce the same per-step losses bit for bit.
//
// Data parallel (a Communicator of N > 1 ranks, dist/communicator.h): options.batch is the
// global batch; every rank draws the same global batch (the samplers stay identical) and
// trains on its rows [rank*b, (rank+1)*b), b = batch / N; the gradients are averaged in
// buckets overlapped with the backward (dist/grad_buckets.h), so every rank takes the same
// AdamW step, equal to the 1-rank step on the whole batch up to summation order. Weights are
// broadcast from rank 0 at the start. Only rank 0 evaluates and writes checkpoints
// (run_training); a checkpoint records the world size and resuming with another is an Error.
//
// On the GPU (device = Device::CUDA): the step runs as one CUDA graph
// (train/cuda_train_step.h) on the device's copy of the weights and moments; the host copies
// (model(), checkpoints, evaluation) are refreshed from the device when read, so the loop, the
// checkpoints and resuming work as on the CPU. Same batches and schedule as the CPU run; the
// weights agree to ~1e-4 relative after 50 steps (summation orders differ). Data parallel on
// GPUs is `--dist nccl` (one process and GPU per rank, same batch split and weight broadcast as
// above): the graph averages the gradients over NCCL in buckets overlapped with the backward,
// before the clipping (train/cuda_data_parallel.h); a CPU trainer refuses an NCCL communicator
// and vice versa.
//
// What it does not do: generate the corpus (the caller passes token streams; see
// train/corpus_stream.h) or print anything (the caller's hooks do).
#pragma once

#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "dist/grad_buckets.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "train/adamw.h"
#include "train/batcher.h"
#include "train/checkpoint.h"
#include "train/cuda_data_parallel.h"
#include "train/cuda_train_step.h"
#include "train/train_options.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace minigpt {

struct StepStats {
  int64_t step = 0;        // 0-based index of the update just done
  float loss = 0.0f;       // mean cross-entropy of this step's batch (before the update)
  float lr = 0.0f;
  double grad_norm = 0.0;  // before clipping
  double seconds = 0.0;    // wall time of the step
  double backward_s = 0.0;   // the backward pass (including starting the all-reduces)
  double comm_wait_s = 0.0;  // waiting for the all-reduces after the backward (exposed)
  int64_t comm_bytes = 0;    // gradient all-reduce payload this step (0 on one rank)
};

class Trainer {
 public:
  // A fresh run: weights from ModelWeights::init_random(options.model, options.seed).
  // options.model.vocab_size must equal vocab.size(). val may be empty (no evaluation).
  // comm: the ranks to train with (null: one process); it must outlive the trainer.
  // device: Device::CUDA trains on the GPU (Error without a GPU; more than one rank needs an
  // NCCL communicator).
  Trainer(TrainOptions options, std::vector<std::string> vocab, TokenStream train, TokenStream val,
          dist::Communicator* comm = nullptr, Device device = Device::CPU);
  // Continues a checkpoint; the streams must be the ones its options generate (the training
  // stream's fingerprint is checked), and the world size the checkpoint's.
  Trainer(TrainCheckpoint checkpoint, TokenStream train, TokenStream val,
          dist::Communicator* comm = nullptr, Device device = Device::CPU);
  ~Trainer();

  const TrainOptions& options() const { return options_; }
  int64_t step() const { return step_; }  // updates done so far
  bool done() const { return step_ >= options_.steps; }
  int64_t tokens_per_step() const { return options_.batch * options_.seq; }  // all ranks
  int64_t local_batch() const { return local_batch_; }                           // this rank's rows
  dist::Communicator& comm() const { return *comm_; }
  const dist::GradBuckets* grad_buckets() const { return buckets_.get(); }  // null on one rank
  const GrammarMiniGPT& model() const;  // on CUDA: refreshed from the device first
  Device device() const { return cuda_ ? Device::CUDA : Device::CPU; }
  const CudaTrainStep* cuda_step() const { return cuda_.get(); }  // null on the CPU
  CudaTrainStep* cuda_step() { return cuda_.get(); }
  CudaDataParallel* cuda_data_parallel() { return data_parallel_.get(); }  // null unless --dist nccl

  // On CUDA, StepStats::seconds is the wall time and backward_s the graph's GPU time (the
  // whole step: the backward is not timed apart inside a graph); over NCCL comm_wait_s is the
  // communication not hidden under the backward (GPU time, CudaDataParallel::exposed_ms).
  StepStats train_step(ThreadPool& pool);
  // Mean loss over the first min(eval_batches, available) held-out batches; nullopt when the
  // validation stream is missing or shorter than one batch.
  std::optional<float> evaluate(ThreadPool& pool);

  TrainCheckpoint checkpoint() const;  // a deep copy of the whole state
  void save_checkpoint(const std::string& path) const;
  ModelFile model_file() const;  // config + vocab + weights (copies)

 private:
  TrainOptions options_;
  std::vector<std::string> vocab_;
  TokenStream train_, val_;
  uint64_t train_fingerprint_;
  // mutable: on CUDA these are host copies of the device state, refreshed by the const readers
  mutable GrammarMiniGPT model_;
  mutable AdamW adamw_;
  BatchSampler sampler_;
  ModelWeights grads_;
  std::vector<int32_t> ids_, targets_;  // (B, T) batch buffers (the global batch)
  int64_t step_ = 0;
  dist::Communicator* comm_;
  int64_t local_batch_;
  std::unique_ptr<dist::GradBuckets> buckets_;  // null on one rank
  // Declared before cuda_, so destroyed after it: the step's graph holds the reducer's events.
  std::unique_ptr<CudaDataParallel> data_parallel_;  // --dist nccl only
  std::unique_ptr<CudaTrainStep> cuda_;              // null on the CPU
  bool device_current_ = false;                  // the device holds the host's state
  mutable bool host_current_ = true;             // the host holds the device's state

  void broadcast_weights();
  void sync_host() const;  // CUDA: host weights and moments <- device, if stale
  StepStats cuda_step(const int32_t* ids, const int32_t* targets);
};

struct LoopHooks {
  std::function<void(const StepStats&)> on_step;
  std::function<void(int64_t step, float val_loss)> on_eval;            // step = updates done
  std::function<void(int64_t step, const std::string& path)> on_checkpoint;
};

struct LoopOptions {
  int64_t until_step = -1;      // stop after this many updates in total (< 0: options.steps)
  int64_t eval_every = 0;       // evaluate every N updates and after the last (0: never)
  std::string checkpoint_path;  // empty: no checkpoints
  int64_t checkpoint_every = 0; // save every N updates and after the last (needs a path)
};

void run_training(Trainer& trainer, const LoopOptions& loop, const LoopHooks& hooks, ThreadPool& pool);

}  // namespace minigpt
