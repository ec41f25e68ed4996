// The generated fixed-shape GEMM (src/compile/codegen_gemm.h) against the engine's packed GEMM
// (cpu::linear_forward_packed) at the model's Linear shapes, 1 thread, and the core's FMA peak
// (autotune.h's fma_peak, printed at start) as the ceiling. Also the JIT's cold compile
// time and warm load time for one typical source (the five model GEMMs in one unit).
//
// Every generated variant is compiled once at start (into a private cache folder, so the cold
// figure is cold). Medians: run with repetitions, pinned, on a quiet machine:
//   taskset -c 1 build/<dir>/bench/compile_gemm_bench --benchmark_repetitions=15
//       --benchmark_report_aggregates_only=true --benchmark_min_time=0.1   (one line)
// Names: Eager/<shape> and Gen/<shape>/<variant>, shape = MxNxK_epilogue.
#include "compile/autotune.h"
#include "compile/codegen_gemm.h"
#include "compile/jit.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cpu/linear.h"

#include "bench_inputs.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace minigpt;
using namespace minigpt::compile;
using Floats = std::vector<float>;

using minigpt::bench::random_floats;

struct Shape {
  int64_t M, N, K;
  GemmEpilogueKind epilogue;
  std::string label() const {
    return fmt::format("{}x{}x{}_{}", M, N, K, gemm_epilogue_name(epilogue));
  }
};

// The model's Linears at B = 2, T = 16 (M = 32 rows; d = 64, V = 600) with their fused
// epilogues, and the decode step's (M = 1).
const std::vector<Shape> kShapes = {
    {32, 192, 64, GemmEpilogueKind::kNone},     {32, 64, 64, GemmEpilogueKind::kResidual},
    {32, 256, 64, GemmEpilogueKind::kGelu},     {32, 64, 256, GemmEpilogueKind::kResidual},
    {32, 600, 64, GemmEpilogueKind::kNone},     {1, 192, 64, GemmEpilogueKind::kNone},
    {1, 64, 64, GemmEpilogueKind::kResidual},   {1, 256, 64, GemmEpilogueKind::kGelu},
    {1, 64, 256, GemmEpilogueKind::kResidual},  {1, 600, 64, GemmEpilogueKind::kNone}};

// Schedules tried at every shape (0 = the default's choice).
struct Variant {
  int mr, nv, unroll, ksplit;
};
const std::vector<Variant> kVariants = {{0, 0, 0, 0}, {4, 4, 1, 0}, {4, 4, 2, 0}, {6, 4, 1, 0},
                                        {6, 4, 2, 0}, {8, 3, 1, 0}, {8, 3, 2, 0}, {12, 2, 1, 0},
                                        {4, 2, 2, 0}, {4, 6, 1, 0}, {4, 5, 1, 0}, {8, 2, 1, 0},
                                        {4, 6, 4, 0}, {8, 3, 4, 0}, {16, 1, 1, 0},
                                        {1, 4, 1, 2}, {1, 4, 2, 4}, {1, 3, 1, 4},
                                        {1, 2, 1, 4}, {1, 4, 1, 4}};

std::filesystem::path bench_cache_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "minigpt_gemm_bench_XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

struct Case {
  Shape shape;
  GeneratedGemm gen;
};

double g_peak_flops = 0;  // per second, set in main

// GFLOP/s and the fraction of the core's FMA peak.
void set_rate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["of_peak"] = benchmark::Counter(flops / g_peak_flops, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::filesystem::path dir = bench_cache_dir();

  // One unit with every variant of every shape.
  std::vector<Case> cases;
  std::string source = gemm_prelude(GemmIsa::kAvx512);
  for (const Shape& s : kShapes)
    for (const Variant& v : kVariants) {
      GemmSpec spec = gemm_spec(s.M, s.N, s.K, s.epilogue);
      spec.mr = static_cast<int>(std::min<int64_t>(v.mr, s.M));
      spec.nv = v.nv;
      spec.unroll = v.unroll;
      spec.ksplit = v.ksplit;
      GeneratedGemm g;
      try {
        g = generate_gemm(spec);
      } catch (const std::exception&) {
        continue;  // a schedule that does not fit this shape
      }
      bool seen = false;
      for (const Case& c : cases) seen = seen || c.gen.name == g.name;
      if (seen) continue;
      source += g.code;
      cases.push_back({s, g});
    }
  JitRequest request;
  request.source = source;
  request.key_extra = "compile_gemm_bench";
  request.name = "gemm_bench";
  request.cache_dir = dir;
  const auto lib = jit_load(request);
  fmt::print(stderr, "compiled {} GEMM variants in one unit: {:.2f} s ({})\n", cases.size(),
             lib->compile_seconds(), host_compiler().describe());

  // The typical source: the five M = 32 model GEMMs at their default schedules.
  {
    std::string typical = gemm_prelude(GemmIsa::kAvx512);
    for (size_t i = 0; i < 5; ++i) {
      typical += generate_gemm(gemm_spec(kShapes[i].M, kShapes[i].N, kShapes[i].K, kShapes[i].epilogue)).code;
    }
    JitRequest r;
    r.source = typical;
    r.name = "typical";
    r.cache_dir = dir;
    const auto cold = jit_load(r);
    std::vector<double> warm;
    for (int i = 0; i < 20; ++i) warm.push_back(jit_load(r)->load_seconds());
    fmt::print(stderr,
               "typical source (5 model GEMMs, {} bytes): cold compile {:.3f} s ({:.3f} s of CPU) + "
               "load {:.4f} s; warm load (cache hit) median {:.2f} ms\n",
               typical.size(), cold->compile_seconds(), cold->compile_cpu_seconds(),
               cold->load_seconds(), median(warm) * 1e3);
  }

  // The ceiling: one core's FMA rate (autotune.h), measured the same way as --explain's.
  const FmaPeak& peak = fma_peak(dir);
  fmt::print(stderr, "FMA peak of this core: {:.1f} GFLOP/s ({})\n", peak.gflops, peak.isa);
  g_peak_flops = peak.gflops * 1e9;

  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(("Eager/" + s.label()).c_str(), [s](benchmark::State& state) {
      ThreadPool pool(1);
      const Floats x = random_floats(s.M * s.K, 1), W = random_floats(s.N * s.K, 2),
                   b = random_floats(s.N, 3), res = random_floats(s.M * s.N, 4);
      Floats y(s.M * s.N), packed(static_cast<size_t>(cpu::linear_packed_floats(s.K, s.N)));
      cpu::linear_pack_weights(W.data(), packed.data(), s.K, s.N);
      cpu::LinearEpilogue ep;
      ep.gelu = s.epilogue == GemmEpilogueKind::kGelu;
      ep.residual = s.epilogue == GemmEpilogueKind::kResidual ? res.data() : nullptr;
      for (auto _ : state) {
        cpu::linear_forward_packed(x.data(), W.data(), packed.data(), b.data(), y.data(), s.M,
                                   s.K, s.N, pool, ep);
        benchmark::DoNotOptimize(y.data());
      }
      set_rate(state, 2.0 * s.M * s.N * s.K);
    });
    for (const Case& c : cases) {
      if (c.shape.label() != s.label()) continue;
      const GemmSpec& g = c.gen.spec;
      const auto fn = reinterpret_cast<GemmFn>(lib->symbol(c.gen.name));
      const std::string name = fmt::format("Gen/{}/r{}v{}u{}s{}", s.label(), g.mr, g.nv, g.unroll, g.ksplit);
      benchmark::RegisterBenchmark(name.c_str(), [s, gen = c.gen, fn](benchmark::State& state) {
        const Floats x = random_floats(s.M * s.K, 1), W = random_floats(s.N * s.K, 2),
                     b = random_floats(s.N, 3), res = random_floats(s.M * s.N, 4);
        Floats y(s.M * s.N), packed(static_cast<size_t>(gen.packed_floats));
        gemm_pack_weights(gen, W.data(), packed.data());
        for (auto _ : state) {
          fn(x.data(), packed.data(), b.data(), res.data(), y.data(), 0, gen.tasks);
          benchmark::DoNotOptimize(y.data());
        }
        set_rate(state, gen.flops);
      });
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}
