// `minigpt bench train --dist single|mpi`: the data-parallel training step (bench_train_dist.cpp).
#pragma once

#include "cli/commands.h"

#include <cstdint>
#include <string>

namespace minigpt::cli {

struct DistBenchArgs {
  std::string dist;      // "single" or "mpi" (run under mpirun)
  int64_t batch = 64;    // global batch (split over the ranks)
  int64_t seq = 16;
  int layers = 4, d_model = 64, heads = 4;
  int64_t steps = 30, warmup = 5;
  uint64_t seed = 42;
  int64_t corpus_tokens = 200'000;
  std::string format = "md";
  double timeout_s = 120.0;
};

void run_bench_train_dist(const DistBenchArgs& args, const GlobalOptions& global);

}  // namespace minigpt::cli
