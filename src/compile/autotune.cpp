// The autotune harness (autotune.h): compile every candidate, check it, time them in
// interleaved rounds, pick the lowest median.
#include "compile/autotune.h"

#include "core/error.h"
#include "core/isa.h"
#include "core/timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace minigpt::compile {

namespace {

struct Loaded {
  std::shared_ptr<JitLibrary> lib;
  void* fn = nullptr;
};

// Compiles (or loads) every distinct request once, compile_threads at a time, then looks up
// each candidate's symbol; errors go into timings.
std::vector<Loaded> compile_all(const std::vector<AutotuneCandidate>& cands, int threads,
                                std::vector<AutotuneTiming>& timings) {
  std::vector<std::string> keys(cands.size());
  std::vector<size_t> unique;  // the first candidate of each distinct key
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].request.source.empty()) continue;  // a host candidate
    keys[i] = jit_key(cands[i].request);
    bool seen = false;
    for (size_t u : unique) seen = seen || keys[u] == keys[i];
    if (!seen) unique.push_back(i);
  }
  std::vector<std::shared_ptr<JitLibrary>> libs(cands.size());
  std::vector<std::string> errors(cands.size());
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t n = next++; n < unique.size(); n = next++) {
      try {
        libs[unique[n]] = jit_load(cands[unique[n]].request);
      } catch (const std::exception& e) {
        errors[unique[n]] = e.what();
      }
    }
  };
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(unique.size())); ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  std::vector<Loaded> loaded(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    if (keys[i].empty()) continue;
    size_t u = 0;
    while (keys[unique[u]] != keys[i]) ++u;
    const size_t first = unique[u];
    if (!errors[first].empty()) {
      timings[i].error = errors[first];
      continue;
    }
    try {
      loaded[i].lib = libs[first];
      loaded[i].fn = libs[first]->symbol(cands[i].symbol);
      timings[i].cache_hit = first != i || libs[first]->cache_hit();
      timings[i].compile_s = first == i ? libs[first]->compile_seconds() : 0;
    } catch (const std::exception& e) {
      loaded[i] = {};
      timings[i].error = e.what();
    }
  }
  return loaded;
}

}  // namespace

AutotuneResult autotune(const std::vector<AutotuneCandidate>& cands, const AutotuneOptions& opt) {
  MINIGPT_CHECK(!cands.empty(), "autotune: no candidates");
  MINIGPT_CHECK(opt.rounds >= 1 && opt.warmup >= 0, "autotune: rounds {} must be >= 1, warmup {} >= 0",
                opt.rounds, opt.warmup);
  AutotuneResult result;
  result.timings.resize(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    result.timings[i].label = cands[i].label;
    MINIGPT_CHECK(static_cast<bool>(cands[i].call), "autotune: candidate '{}' has no call", cands[i].label);
  }
  const std::vector<Loaded> loaded = compile_all(cands, opt.compile_threads, result.timings);

  // First call and check; then the warm-up, and how many calls make one sample.
  std::vector<size_t> live;
  for (size_t i = 0; i < cands.size(); ++i) {
    AutotuneTiming& t = result.timings[i];
    if (!t.error.empty()) continue;
    try {
      cands[i].call(loaded[i].fn);
      if (cands[i].check) t.error = cands[i].check();
      if (!t.error.empty()) {
        t.error = "wrong result: " + t.error;
        continue;
      }
      for (int w = 0; w < opt.warmup; ++w) cands[i].call(loaded[i].fn);
      const Timer timer;
      cands[i].call(loaded[i].fn);
      const double one_us = std::max(timer.elapsed_us(), 1e-3);
      t.inner = static_cast<int>(std::clamp(opt.min_sample_us / one_us, 1.0, 1e6));
    } catch (const std::exception& e) {
      t.error = std::string("failed: ") + e.what();
      continue;
    }
    live.push_back(i);
  }
  MINIGPT_CHECK(!live.empty(), "autotune: every candidate failed; first: {}: {}",
                result.timings[0].label, result.timings[0].error);

  // Rounds: one sample of each live candidate per round.
  std::vector<std::vector<double>> samples(cands.size());
  for (int r = 0; r < opt.rounds; ++r)
    for (size_t i : live) {
      const int inner = result.timings[i].inner;
      const Timer timer;
      for (int k = 0; k < inner; ++k) cands[i].call(loaded[i].fn);
      samples[i].push_back(timer.elapsed_us() / inner);
    }
  for (size_t i : live) {
    AutotuneTiming& t = result.timings[i];
    t.median_us = median(samples[i]);
    t.min_us = *std::min_element(samples[i].begin(), samples[i].end());
    if (result.best < 0 || t.median_us < result.timings[result.best].median_us)
      result.best = static_cast<int>(i);
  }
  result.library = loaded[result.best].lib;
  result.fn = loaded[result.best].fn;
  return result;
}

std::string AutotuneResult::table() const {
  std::string o = "| candidate | median us | min us | vs best | note |\n| --- | --- | --- | --- | --- |\n";
  const double best_us = best >= 0 ? timings[best].median_us : 0;
  for (size_t i = 0; i < timings.size(); ++i) {
    const AutotuneTiming& t = timings[i];
    if (!t.error.empty()) {
      std::string why = t.error.substr(0, t.error.find('\n'));
      o += fmt::format("| {} | - | - | - | dropped: {} |\n", t.label, why);
      continue;
    }
    o += fmt::format("| {} | {:.3f} | {:.3f} | {:.2f}x | {}{} |\n", t.label, t.median_us, t.min_us,
                     t.median_us / best_us, static_cast<int>(i) == best ? "**chosen** " : "",
                     t.compile_s > 0 ? fmt::format("compiled in {:.2f} s", t.compile_s)
                                     : (t.cache_hit ? "cached" : "host"));
  }
  return o;
}

const FmaPeak& fma_peak(const std::filesystem::path& cache_dir) {
  static const FmaPeak peak = [&cache_dir] {
    // The peak of the vectors the active ISA uses (MINIGPT_ISA); scalar code is measured
    // against the AVX2 peak, the machine's, as it would be if it vectorised.
    const bool avx512 = active_isa() == Isa::Avx512;
    MINIGPT_CHECK(avx512 || cpu_supports(Isa::Avx2), "fma_peak: the CPU has neither AVX-512 nor AVX2 with FMA");
    const int lanes = avx512 ? 16 : 8, chains = avx512 ? 24 : 12;  // of 32 / 16 registers
    const char* v = avx512 ? "__m512" : "__m256";
    const char* p = avx512 ? "_mm512" : "_mm256";
    JitRequest r;
    r.name = "fma_peak";
    r.cache_dir = cache_dir;
    r.source = fmt::format(R"(#include <immintrin.h>
#include <stdint.h>
// {2} independent FMA chains: enough to cover the FMA latency on every port.
extern "C" float mg_fma_peak(int64_t iters) {{
  {0} c[{2}];
  const {0} a = {1}_set1_ps(0.999f), b = {1}_set1_ps(1e-3f);
  for (int i = 0; i < {2}; ++i) c[i] = {1}_set1_ps((float)i);
  for (int64_t it = 0; it < iters; ++it) {{
#pragma GCC unroll {2}
    for (int i = 0; i < {2}; ++i) c[i] = {1}_fmadd_ps(c[i], a, b);
  }}
  {0} s = c[0];
  for (int i = 1; i < {2}; ++i) s = {1}_add_ps(s, c[i]);
  float out[{3}];
  {1}_storeu_ps(out, s);
  return out[0];
}}
)",
                           v, p, chains, lanes);
    const auto lib = jit_load(r);
    const auto fn = reinterpret_cast<float (*)(int64_t)>(lib->symbol("mg_fma_peak"));
    const int64_t iters = 4096;  // ~0.5 ms at 2 GHz
    volatile float sink = fn(iters);  // warm-up
    double best_s = 1e30;
    for (int run = 0; run < 15; ++run) {
      const Timer t;
      sink = fn(iters);
      best_s = std::min(best_s, t.elapsed_s());
    }
    (void)sink;
    FmaPeak f;
    f.isa = avx512 ? "avx512" : "avx2";
    f.gflops = 2.0 * lanes * chains * static_cast<double>(iters) / best_s * 1e-9;
    return f;
  }();
  return peak;
}

}  // namespace minigpt::compile
