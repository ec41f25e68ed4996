// The CUDA back end's warm compile (a cache hit) on the CPU side, stage by stage, for the shipped
// model's graph at (B = 2, T = 16) with the variant the GPU runner picks by default on sm_90
// (runner_cuda.cpp's default_cuda_variant: since gpu_rows15 the rows form, codegen_cuda_rows.h, one
// kernel; before it generated GEMMs, PDL, the projection + MLP in 8-CTA clusters). The passes and
// codegen stages below time run_passes + schedule and generate_cuda (the 14-kernel form's path);
// lower and the whole hit time the default's (plan_rows + generate_rows). Needs no GPU: the architecture is given
// ("sm_90a"), NVRTC compiles the cubin once into a private cache folder, then every timed
// cuda_jit_compile is a hit.
//
//   taskset -c 1 build/default/bench/compile_cuda_warm_bench --benchmark_repetitions=10
//       (add --benchmark_report_aggregates_only=true for medians only)
//
// Stages: capture (capture_gpt), passes (run_passes + schedule), codegen (generate_cuda), lower
// (lower_cuda: both), key (cuda_jit_key: SHA-256 of the source), hit (cuda_jit_compile on a
// warm entry: key, .json parse and checks, cubin read and SHA-256), and the whole CPU side of a
// hit as the runner runs it (capture + lower + hit). What it does not time: the GPU side (module
// load, arena, graph capture; 1.2-1.4 ms on the H200).
#include "compile/capture.h"
#include "compile/cuda/jit_cuda.h"
#include "compile/cuda/runner_cuda.h"
#include "compile/lower_cuda.h"
#include "compile/passes/passes.h"
#include "compile/schedule.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <filesystem>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

ModelConfig shipped_config() {
  ModelConfig c;  // n_layer 4, n_head 4, d_model 64, block_size 64
  c.vocab_size = 611;
  return c;
}

const Graph& graph() {
  static const Graph g = capture_gpt(shipped_config(), 2, 16);
  return g;
}

// the runner's default rule on sm_90 (every matmul at most kLaunchBoundRows rows: generated GEMMs, PDL, clusters)
CudaCodegenOptions sm90_default() {
  std::string why;
  return default_cuda_variant_for(graph(), 9, why);
}

CudaJitRequest request() {
  const CudaLowered l = lower_cuda(graph(), PassOptions{}, sm90_default());
  CudaJitRequest req;
  req.source = l.code.source;
  req.key_extra = fmt::format("codegen_cuda v{} graph {} rows", kCodegenCudaVersion, l.code.graph_hash);
  req.name = graph().name;
  req.arch = "sm_90a";
  req.cache_dir = std::filesystem::temp_directory_path() / "minigpt_compile_cuda_warm_bench";
  return req;
}

void BM_Capture(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(capture_gpt(shipped_config(), 2, 16));
}

void BM_Passes(benchmark::State& state) {
  PassOptions popt;
  popt.matmul_prologue = popt.fuse_mlp = popt.fuse_mlp_proj = true;
  for (auto _ : state) benchmark::DoNotOptimize(cuda_schedule(schedule(run_passes(graph(), popt), GemmBackend::kGenerated), true));
}

void BM_Codegen(benchmark::State& state) {
  const CudaLowered l = lower_cuda(graph(), PassOptions{}, sm90_default());
  for (auto _ : state) benchmark::DoNotOptimize(generate_cuda(l.schedule, sm90_default()));
}

void BM_Lower(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(lower_cuda(graph(), PassOptions{}, sm90_default()));
}

void BM_Key(benchmark::State& state) {
  const CudaJitRequest req = request();
  for (auto _ : state) benchmark::DoNotOptimize(cuda_jit_key(req));
}

void BM_Hit(benchmark::State& state) {
  const CudaJitRequest req = request();
  cuda_jit_compile(req);  // NVRTC once (a miss on the first run)
  for (auto _ : state) {
    const CudaBinary b = cuda_jit_compile(req);
    if (!b.cache_hit) state.SkipWithError("not a cache hit");
    benchmark::DoNotOptimize(b);
  }
}

// What the runner does on a hit before touching the GPU.
void BM_WholeHitCpuSide(benchmark::State& state) {
  CudaJitRequest req = request();
  cuda_jit_compile(req);
  for (auto _ : state) {
    const Graph g = capture_gpt(shipped_config(), 2, 16);
    const CudaLowered l = lower_cuda(g, PassOptions{}, sm90_default());
    req.source = l.code.source;
    req.key_extra = fmt::format("codegen_cuda v{} graph {} rows", kCodegenCudaVersion, l.code.graph_hash);
    const CudaBinary b = cuda_jit_compile(req);
    if (!b.cache_hit) state.SkipWithError("not a cache hit");
    benchmark::DoNotOptimize(b);
  }
}

}  // namespace

BENCHMARK(BM_Capture)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Passes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Codegen)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Lower)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Key)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Hit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WholeHitCpuSide)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
