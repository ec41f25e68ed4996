// max-autotune for one Linear: generated fixed-shape GEMM variants (register tiles, K-chain
// splits, the thread split over the runtime's pool) against the library GEMM
// (cpu::linear_forward_packed, what default mode calls), all on the layer's own weights, each
// checked against the library's result; the fastest is returned with every timing.
//
// What it does not do: remember the choice (the caller's compiled graph does), or pack the
// weights for the chosen variant (gemm_pack_weights).
#pragma once

#include "compile/autotune.h"
#include "compile/codegen_gemm.h"
#include "compile/ir.h"
#include "core/thread_pool.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace minigpt::compile {

struct GemmProblem {
  int64_t M = 0, N = 0, K = 0;  // y (M, N) = x (M, K) W^T + b
  GemmEpilogueKind epilogue = GemmEpilogueKind::kNone;
  const float* W = nullptr;  // (N, K), the layer's weights
  const float* b = nullptr;  // (N) or null
  ThreadPool* pool = nullptr;  // the runtime's; with more than one thread the split is tried too
};

struct GemmChoice {
  bool library = false;  // the library GEMM won
  GemmSpec spec;         // else the generated variant (resolved); ksplit > 1: another sum order
  bool threaded = false;  // call its NAME_mt wrapper (generate_gemm_parallel) with grain 1
  AutotuneResult result;  // every candidate, for the compile report and --explain
};

// The schedules tried for a shape: the default, the tiles that fit the registers (6 x 4, 8 x 3,
// 12 x 2, 4 x 4, 8 x 2 vectors; one row: 2 and 4 FMA chains per column vector).
std::vector<GemmSpec> gemm_variants(int64_t M, int64_t N, int64_t K, GemmEpilogueKind epilogue,
                                    bool bias, GemmIsa isa = gemm_isa(active_isa()));

// All variants are generated into one source (one compile). x and the residual are seeded
// random inputs of the problem's shape (the timing does not depend on their values).
GemmChoice autotune_gemm(const GemmProblem& problem, const std::vector<GemmSpec>& variants,
                         const AutotuneOptions& options = {},
                         const std::filesystem::path& cache_dir = {});

// The same for several problems (a graph's distinct GEMM shapes): the problems' variants in
// one source per compile thread (options.compile_threads, 0 = the cores), compiled at once,
// then each problem timed on its own candidates by autotune(). choices[i] is problem i's.
std::vector<GemmChoice> autotune_gemms(const std::vector<GemmProblem>& problems,
                                       const std::vector<std::vector<GemmSpec>>& variants,
                                       const AutotuneOptions& options = {},
                                       const std::filesystem::path& cache_dir = {});

// max-autotune of a graph's matmuls: every distinct GEMM shape of `fused` (after the passes),
// on the weights of its first matmul (weight(name) gives them), its gemm_variants against the
// library GEMM, all in one source (autotune_gemms), on one thread. The picks go to
// CodegenOptions::gemm_picks; `report` (if given) gets one line per shape.
std::vector<GemmPick> autotune_graph_gemms(const Graph& fused,
                                           const std::function<const float*(const std::string&)>& weight,
                                           const AutotuneOptions& options = {},
                                           const std::filesystem::path& cache_dir = {},
                                           std::string* report = nullptr);

}  // namespace minigpt::compile
