// bench_model_cuda(): the timing half of `minigpt bench model --device cuda` (the table and the
// peers are in cmd_bench_model.cpp). Compiled in every build; without CUDA it throws.
#pragma once

#include "model/gpt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::cli {

struct CudaTimeRow {
  std::string name;
  int64_t B = 0, T = 0;
  double us = 0;        // median per call (forward) or per token (decode)
  int runs = 0;
  bool decode = false;  // a per-token row: tokens/s = 1e6 / us, no ratio to the forward
};

struct CudaModelTimes {
  std::string gpu;            // device name
  double forward_us = 0;      // the default path's forward graph (the ratio column's reference)
  double max_logit_diff = 0;  // |GPU - CPU| over the benchmark's forward logits (default path)
  std::vector<CudaTimeRow> rows;  // in table order; the first is forward_us's
};

// ids (B, T); ctx (block_size) fed one token at a time per decode run. runs/warmup as the CPU's.
CudaModelTimes bench_model_cuda(const GrammarMiniGPT& model, const std::vector<int32_t>& ids, int64_t B,
                                int64_t T, const std::vector<int32_t>& ctx, int runs, int warmup);

}  // namespace minigpt::cli
