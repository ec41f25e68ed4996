// Google Benchmark microbenchmarks of the CPU layers (src/kernels/cpu) at the model's sizes:
// inference (B=2, T=16: N=32 rows), decode (N=1) and training (B=64, T=16: N=1024 rows), on
// 1 and 2 threads (the benchmark argument). Inputs are random, never zeros; median reported
// with --benchmark_repetitions=N --benchmark_report_aggregates_only=true.
//
//   build/<dir>/bench/micro_layers --benchmark_filter=Linear --benchmark_min_time=0.2
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"

#include "bench_inputs.h"

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

namespace {

using minigpt::ThreadPool;
using Floats = std::vector<float>;

using minigpt::bench::random_floats;

// Args: threads, N, in, out.
void BM_LinearForward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), in = state.range(2), out = state.range(3);
  const Floats x = random_floats(N * in, 1), W = random_floats(out * in, 2), b = random_floats(out, 3);
  Floats y(N * out);
  for (auto _ : state) {
    minigpt::cpu::linear_forward(x.data(), W.data(), b.data(), y.data(), N, in, out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * in * out, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Same, with W packed once (linear_forward_packed): what a caller that keeps packed weights pays.
void BM_LinearForwardPacked(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), in = state.range(2), out = state.range(3);
  const Floats x = random_floats(N * in, 1), W = random_floats(out * in, 2), b = random_floats(out, 3);
  Floats y(N * out), packed(static_cast<size_t>(minigpt::cpu::linear_packed_floats(in, out)));
  minigpt::cpu::linear_pack_weights(W.data(), packed.data(), in, out);
  for (auto _ : state) {
    minigpt::cpu::linear_forward_packed(x.data(), W.data(), packed.data(), b.data(), y.data(), N, in, out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * in * out, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_LinearBackward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), in = state.range(2), out = state.range(3);
  const Floats x = random_floats(N * in, 1), W = random_floats(out * in, 2), dy = random_floats(N * out, 3);
  Floats dx(N * in), dW(out * in), db(out);
  for (auto _ : state) {
    minigpt::cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), db.data(), N,
                                  in, out, pool);
    benchmark::DoNotOptimize(dW.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * N * in * out, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void linear_args(benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (int64_t N : {1, 32, 1024})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 192}, {64, 64}, {64, 256}, {256, 64}, {64, 600}})
        b->Args({t, N, in, out});
}
BENCHMARK(BM_LinearForward)->Apply(linear_args)->ArgNames({"t", "N", "in", "out"});
BENCHMARK(BM_LinearForwardPacked)->Apply(linear_args)->ArgNames({"t", "N", "in", "out"});
BENCHMARK(BM_LinearBackward)->Apply([](benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 192}, {64, 64}, {64, 256}, {256, 64}, {64, 600}})
      b->Args({t, 1024, in, out});
})->ArgNames({"t", "N", "in", "out"});

// Args: threads, N (rows of C = 64).
void BM_LayerNormForward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), C = 64;
  const Floats x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3);
  Floats y(N * C), mean(N), rstd(N);
  for (auto _ : state) {
    minigpt::cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f, pool);
    benchmark::DoNotOptimize(y.data());
  }
}
void BM_LayerNormBackward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), C = 64;
  const Floats x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3), dy = random_floats(N * C, 4);
  Floats y(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  minigpt::cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f, pool);
  for (auto _ : state) {
    minigpt::cpu::layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), N, C, pool);
    benchmark::DoNotOptimize(dx.data());
  }
}
BENCHMARK(BM_LayerNormForward)->ArgsProduct({{1, 2}, {32, 1024}})->ArgNames({"t", "N"});
BENCHMARK(BM_LayerNormBackward)->ArgsProduct({{1, 2}, {1024}})->ArgNames({"t", "N"});

// Args: threads, n elements (N * 4d).
void BM_GeluForward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t n = state.range(1);
  const Floats x = random_floats(n, 1);
  Floats y(n);
  for (auto _ : state) {
    minigpt::cpu::gelu_forward(x.data(), y.data(), n, pool);
    benchmark::DoNotOptimize(y.data());
  }
}
void BM_GeluBackward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t n = state.range(1);
  const Floats x = random_floats(n, 1), dy = random_floats(n, 2);
  Floats dx(n);
  for (auto _ : state) {
    minigpt::cpu::gelu_backward(x.data(), dy.data(), dx.data(), n, pool);
    benchmark::DoNotOptimize(dx.data());
  }
}
BENCHMARK(BM_GeluForward)->ArgsProduct({{1, 2}, {32 * 256, 1024 * 256}})->ArgNames({"t", "n"});
BENCHMARK(BM_GeluBackward)->ArgsProduct({{1, 2}, {1024 * 256}})->ArgNames({"t", "n"});

// Args: threads, B (T = 16, C = 64, NH = 4).
void BM_AttentionForward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t B = state.range(1), T = 16, C = 64, NH = 4;
  const Floats qkv = random_floats(B * T * 3 * C, 1);
  Floats out(B * T * C), att(B * NH * T * T);
  for (auto _ : state) {
    minigpt::cpu::attention_forward(qkv.data(), out.data(), att.data(), B, T, C, NH, pool);
    benchmark::DoNotOptimize(out.data());
  }
}
void BM_AttentionBackward(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t B = state.range(1), T = 16, C = 64, NH = 4;
  const Floats qkv = random_floats(B * T * 3 * C, 1), dout = random_floats(B * T * C, 2);
  Floats out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
  minigpt::cpu::attention_forward(qkv.data(), out.data(), att.data(), B, T, C, NH, pool);
  for (auto _ : state) {
    minigpt::cpu::attention_backward(dout.data(), qkv.data(), att.data(), dqkv.data(), B, T, C, NH, pool);
    benchmark::DoNotOptimize(dqkv.data());
  }
}
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t t = state.range(0), C = 64, NH = 4;
  const Floats q = random_floats(C, 1), k = random_floats((t + 1) * C, 2), v = random_floats((t + 1) * C, 3);
  Floats out(C);
  for (auto _ : state) {
    minigpt::cpu::attention_decode_step(q.data(), k.data(), v.data(), out.data(), t, C, NH);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_AttentionForward)->ArgsProduct({{1, 2}, {2, 64}})->ArgNames({"t", "B"});
BENCHMARK(BM_AttentionBackward)->ArgsProduct({{1, 2}, {64}})->ArgNames({"t", "B"});
BENCHMARK(BM_AttentionDecode)->Arg(15)->ArgName("pos");

// Args: threads, N (V = 600).
void BM_CrossEntropy(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t N = state.range(1), V = 600;
  const Floats logits = random_floats(N * V, 1);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = static_cast<int32_t>((n * 37) % V);
  Floats d(N * V);
  for (auto _ : state) {
    benchmark::DoNotOptimize(minigpt::cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d.data(), N, V, pool));
  }
}
BENCHMARK(BM_CrossEntropy)->ArgsProduct({{1, 2}, {1024}})->ArgNames({"t", "N"});

}  // namespace

BENCHMARK_MAIN();
