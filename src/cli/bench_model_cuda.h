// bench_model_cuda(): the timing half of `minigpt bench model --device cuda` (the table and the
// peers are in cmd_bench_model.cpp). Compiled in every build; without CUDA it throws.
#pragma once

#include "model/gpt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::cli {

struct CudaModelTimes {
  std::string gpu;              // device name
  double forward_us = 0;        // one graph replay (whole-layer kernels) between CUDA events, median
  double forward_perop_us = 0;  // the same with a kernel per op (fused Linears)
  double forward_b2b_us = 0;    // 100 replays back to back between two events, per replay, median
  double forward_cublas_us = 0; // one graph replay with cuBLAS Linears, median
  double forward_host_us = 0;   // CudaGPT::forward (ids in, replay, logits+probs out, wait), wall clock
  double decode_step_us = 0;    // CudaDecoder::step (copies in the graph, wait), wall clock per token
  double decode_graph_us = 0;   // the decode graph alone between CUDA events, median
  double max_logit_diff = 0;    // |GPU - CPU| over the benchmark's forward logits
  int decode_runs = 0;
};

// ids (B, T); ctx (block_size) fed one token at a time per decode run. runs/warmup as the CPU's.
CudaModelTimes bench_model_cuda(const GrammarMiniGPT& model, const std::vector<int32_t>& ids, int64_t B,
                                int64_t T, const std::vector<int32_t>& ctx, int runs, int warmup);

}  // namespace minigpt::cli
