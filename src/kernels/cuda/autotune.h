// The autotuner of the fused CUDA softmax: times every candidate FusedConfig
// (softmax.h: fused_candidates) on the caller's input and keeps the fastest per shape bucket in
// the JSON cache (autotune_cache.h). A cached entry is used when its key matches (same GPU,
// compute capability, CUDA runtime and driver, kernel source hash and bucket) unless `retune`.
// Host code (CUDA runtime API); needs a visible GPU.
#pragma once

#include "kernels/cuda/autotune_cache.h"
#include "kernels/cuda/fused_config.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <ostream>
#include <string>

namespace minigpt::cuda {

struct AutotuneOptions {
  std::string cache_path;        // "" = no cache (always tune, never write)
  bool retune = false;           // ignore cached entries (the new result is still written)
  int launches_per_timing = 20;  // flushed single launches per candidate (large shapes): 10
                                 // left the pick to noise between configs within 1%
  int timings = 3;               // graph replays per candidate, the best kept (small shapes)
  std::ostream* log = nullptr;   // one line per tuned shape when set
  bool log_candidates = false;   // with `log`: also one line per candidate (its times, score)
};

struct AutotuneResult {
  FusedConfig config;
  double us = 0;          // time per launch of the winner in the sweep (graph mode if small)
  bool from_cache = false;
  int candidates = 0;     // how many configs the sweep timed (0 when from the cache)
  std::string key;        // AutotuneKey::str()
};

// The key for (rows, cols) on the current device.
AutotuneKey autotune_key(int64_t rows, int64_t cols);

// Picks the config for (rows, cols). `x` is the caller's device input (rows x cols, read only);
// outputs go to a scratch buffer the tuner allocates. Each candidate is timed the way the
// benchmark reports its size: shapes moving <= 64 MB in graph mode (100 launches in one CUDA
// graph, best of `timings` replays) and as `launches_per_timing` single launches with L2 flushed
// before each (median), the winner having the least sum of its two times over the best of each;
// larger shapes as flushed single launches only. The sweep runs on a stream of its own after
// `stream` has finished its work. Throws Error on CUDA failures.
AutotuneResult autotune_fused(const float* x, int64_t rows, int64_t cols,
                              const AutotuneOptions& options, cudaStream_t stream);

}  // namespace minigpt::cuda
