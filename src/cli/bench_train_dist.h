// `minigpt bench train --dist single|mpi|nccl`: the data-parallel training step (bench_train_dist.cpp).
#pragma once

#include "cli/commands.h"
#include "train/train_options.h"

#include <cstdint>
#include <string>

namespace minigpt::cli {

struct DistBenchArgs {
  std::string dist;      // "single", "mpi" or "nccl" (run under mpirun)
  std::string device = "cpu";  // "cuda": the CUDA step (train/cuda_train_step.h), NCCL between GPUs
  int64_t batch = 64;    // global batch (split over the ranks)
  int64_t seq = 16;
  int layers = 4, d_model = 64, heads = 4;
  int64_t steps = 30, warmup = 5;
  uint64_t seed = 42;
  int64_t corpus_tokens = 200'000;
  std::string format = "md";
  double timeout_s = 120.0;
};

// The benches' recipe (not validated): `warmup + steps` steps, no held-out evaluation, the
// default model with the given vocabulary. Shared by bench train with and without --dist.
TrainOptions bench_train_options(uint64_t seed, int64_t batch, int64_t seq, int64_t steps, int64_t warmup,
                                 int64_t corpus_tokens, int vocab_size);

void run_bench_train_dist(const DistBenchArgs& args, const GlobalOptions& global);

}  // namespace minigpt::cli
