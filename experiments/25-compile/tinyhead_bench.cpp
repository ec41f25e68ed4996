// TinyHead eager against compiled, for experiment 25 (run.py builds and runs it).
//
// The CLI has no TinyHead bench (`minigpt bench model` times the GPT; `minigpt compile --graph
// tinyhead --explain` times only the compiled call()), so this program links the engine's own
// libraries (build/default/src/*/lib*.a) and times, in one process on one thread pool:
//   eager:    TinyHead::forward (cpu::linear_forward, then cpu::softmax), what the capture is
//             taken from;
//   compiled: CompiledGraph::run of capture_tinyhead(B) (the generated code through the JIT).
// Both on the same x (seed 42), calls interleaved in blocks of 10 so that load changes hit both;
// warm-up calls first; medians per call in µs. It also checks max |compiled - eager| < 1e-6
// (the seed's acceptance) and exits 1 if not. Prints one JSON object on stdout.
//
// Usage: tinyhead_bench THREADS RUNS [B [MODE]]  (MODE default | max-autotune; MINIGPT_CACHE_DIR as
// for minigpt compile)
// What it does not do: time torch (bench/peers/torch_compile_dump.py does).
#include "compile/capture.h"
#include "compile/runner.h"
#include "core/thread_pool.h"
#include "core/timer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

using namespace minigpt;

namespace {
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: tinyhead_bench THREADS RUNS [B [MODE]]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int runs = std::atoi(argv[2]);
  const int64_t B = argc > 3 ? std::atoll(argv[3]) : 2;
  const std::string mode = argc > 4 ? argv[4] : "default";
  if (threads < 1 || runs < 10 || B < 1) {
    fmt::print(stderr, "tinyhead_bench: THREADS >= 1, RUNS >= 10, B >= 1 (got {}, {}, {})\n", threads, runs, B);
    return 2;
  }
  ThreadPool pool(threads);
  const compile::TinyHead head = compile::TinyHead::init(42);
  std::vector<float> x(static_cast<size_t>(B * compile::TinyHead::kIn));
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  std::vector<float> y_eager(static_cast<size_t>(B * compile::TinyHead::kOut));
  std::vector<float> y_comp(y_eager.size());

  compile::WeightBinding weights = compile::bind_tinyhead(head);
  compile::CompileOptions co;
  co.quiet = true;
  co.mode = mode;
  Timer ct;
  compile::CompiledGraph cg(compile::capture_tinyhead(B), weights, co);
  const double compile_s = ct.elapsed_s();
  const void* in[] = {x.data()};
  float* out[] = {y_comp.data()};

  head.forward(x.data(), B, y_eager.data(), pool);
  cg.run(in, out, pool);
  double max_diff = 0;
  for (size_t i = 0; i < y_eager.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(y_eager[i] - y_comp[i])));

  for (int i = 0; i < 50; ++i) {  // warm-up
    head.forward(x.data(), B, y_eager.data(), pool);
    cg.run(in, out, pool);
  }
  std::vector<double> te, tc, ce, cc;
  for (int done = 0; done < runs; done += 10) {
    for (int i = 0; i < 10; ++i) {
      const double c0 = thread_cpu_us();
      Timer t;
      head.forward(x.data(), B, y_eager.data(), pool);
      te.push_back(t.elapsed_us());
      ce.push_back(thread_cpu_us() - c0);
    }
    for (int i = 0; i < 10; ++i) {
      const double c0 = thread_cpu_us();
      Timer t;
      cg.run(in, out, pool);
      tc.push_back(t.elapsed_us());
      cc.push_back(thread_cpu_us() - c0);
    }
  }
  const double e = median(te), c = median(tc);
  fmt::print(
      "{{\"graph\": \"tinyhead\", \"mode\": \"{}\", \"variant\": \"{}\", \"B\": {}, \"threads\": {}, \"runs\": {}, \"eager_median_us\": {:.3f}, "
      "\"compiled_median_us\": {:.3f}, \"eager_over_compiled\": {:.3f}, \"eager_thread_cpu_median_us\": {:.3f}, "
      "\"compiled_thread_cpu_median_us\": {:.3f}, \"max_abs_diff\": {:.3g}, \"tolerance\": 1e-06, "
      "\"compile_s\": {:.4f}, \"cache_hit\": {}, \"eager\": \"TinyHead::forward (cpu::linear_forward + cpu::softmax)\", "
      "\"compiled\": \"CompiledGraph::run(capture_tinyhead)\"}}\n",
      mode, cg.stats().variant, B, threads, te.size(), e, c, e / c, median(ce), median(cc), max_diff, compile_s,
      cg.stats().cache_hit ? "true" : "false");
  return max_diff < 1e-6 ? 0 : 1;
}
