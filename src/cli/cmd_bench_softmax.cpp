// `minigpt bench softmax --device cpu|cuda [-o md|json|csv] [--shapes 64x600,...] [--no-peers]`
//
// The softmax family against its ceiling and its peers in one run, as a Report. This file
// parses the command line, runs the CPU path (bench_softmax_cpu) and hands --device cuda to
// bench_softmax_cuda() (bench_softmax_cuda.cpp, not this file). Both fill one Report whose
// columns are kSoftmaxColumns:
//   kernel, B, V, MB, threads, runs, time_us, GB/s, frac_of_copy, vs_torch
// MB = bytes moved = 2 * B * V * 4 (x read once, y written once: the algorithmic minimum);
// frac_of_copy = GB/s over the measured copy bandwidth; vs_torch = torch.softmax time / this
// time (> 1: faster than torch), torch measured in the same run with the same threads.
//
// CPU path: every kernel (naive, fused, simd with the best ISA, simd forced to AVX2, and two
// copies of the same bytes for reference) runs with its rows split over the -t pool (naive and
// fused are single-threaded kernels, called on row ranges), median of repeated runs in this
// process; inputs uniform in [-8, 8) from --seed (never zeros); y poisoned with NaN before the
// first run and checked after the last (every element written, rows against
// softmax_reference). The ceiling is the faster of two copy methods (memcpy, and copy_stream's
// streaming stores), each the best of 9 timed copies of --copy-mib (default kCopyMiB: far beyond
// the 300 MiB LLC of the machines we use; tests pass a small size and measure a cache instead), pre-faulted and split over the same threads, before and after the
// kernels (measure_copy says why the best, copy_stream.h why two methods). The peers
// (torch.softmax, torch.compile) come from bench/peers/softmax_peers.py, run as a subprocess.
// The JSON form also carries what `python -m minigpt.plot roofline` needs (meta.roofline).
#include "cli/bench_conditions.h"
#include "cli/bench_softmax.h"
#include "cli/commands.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/report.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cpu/copy_stream.h"
#include "kernels/cpu/softmax.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <time.h>

namespace minigpt::cli {

std::vector<std::pair<int64_t, int64_t>> default_softmax_shapes() {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t b : {64, 512, 4096, 32768, 262144}) shapes.emplace_back(b, 600);
  shapes.emplace_back(4096, 32000);
  shapes.emplace_back(2048, 50257);
  return shapes;
}

namespace {

const std::vector<std::string> kSoftmaxColumns = {"kernel", "B",    "V",       "MB",
                                                  "threads", "runs", "time_us", "GB/s",
                                                  "frac_of_copy", "vs_torch"};

constexpr double kTimeBudgetS = 1.0;              // per (kernel, shape), after warm-up
constexpr double kSettleS = 0.010;                 // untimed calls of a kernel before each timed one
constexpr int kMinRuns = 5;

// FLOPs per element, counted once per algorithmic operation: max 1 (compare), sub 1 (x - m),
// exp 1 (as one special-function op; the polynomial costs ~15 vector ops on the CPU, see
// meta.roofline), sum 1 (add), div 1 (a multiply by 1/s in simd). 5 FLOP / 8 bytes.
constexpr double kFlopsPerElement = 5.0;
constexpr double kBytesPerElement = 8.0;

std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto x = item.find('x');
    MINIGPT_CHECK(x != std::string::npos, "--shapes: '{}' is not BxV (e.g. 64x600)", item);
    int64_t b = -1, v = -1;
    try {
      size_t used_b = 0, used_v = 0;
      b = std::stoll(item.substr(0, x), &used_b);
      v = std::stoll(item.substr(x + 1), &used_v);
      MINIGPT_CHECK(used_b == x && used_v == item.size() - x - 1, "--shapes: '{}' is not BxV", item);
    } catch (const std::logic_error&) {
      MINIGPT_FAIL("--shapes: '{}' is not BxV (e.g. 64x600)", item);
    }
    MINIGPT_CHECK(b >= 0 && v >= 1, "--shapes: '{}' needs B >= 0 and V >= 1", item);
    shapes.emplace_back(b, v);
  }
  MINIGPT_CHECK(!shapes.empty(), "--shapes: no shape given");
  return shapes;
}

std::string shapes_arg(const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  std::string s;
  for (const auto& [b, v] : shapes) s += fmt::format("{}{}x{}", s.empty() ? "" : ",", b, v);
  return s;
}

// Median wall time in us of fn(), after up to `warmup` untimed calls; runs until `repeats`
// timed calls or kTimeBudgetS, whichever first, but at least kMinRuns.
struct Timing {
  double us = 0;
  int runs = 0;
};
Timing time_runs(const std::function<void()>& fn, int warmup, int repeats) {
  Timer warm;
  for (int i = 0; i < warmup && warm.elapsed_s() < kTimeBudgetS / 2; ++i) fn();
  std::vector<double> us;
  Timer total;
  while (static_cast<int>(us.size()) < std::max(repeats, 1) &&
         (static_cast<int>(us.size()) < kMinRuns || total.elapsed_s() < kTimeBudgetS)) {
    Timer t;
    fn();
    us.push_back(t.elapsed_us());
  }
  return {median(us), static_cast<int>(us.size())};
}

// Round-robin timing of several functions: each round calls every function, so that load
// from other processes on a shared machine falls on all of them alike. Each timed call follows
// untimed calls of the same function for at least kSettleS (one call at least): it then meets
// the machine as that function leaves it (its steady state, as a peer timed back to back in
// its own process does), not as the previous kernel left it. Measured on the 2-core VM, simd
// at (4096, 600) timed right after the scalar fused kernel took 1120-1159 us with one settling
// call, 975-980 us with four, 715-848 us with 10 ms of them, 727-857 us with fused left out of
// the rotation: the effect outlasts the caches' refill (the core's clock, we think). Runs
// rounds until `repeats` or a budget of kTimeBudgetS per function (timed calls only), with at
// least kMinRuns. Returns the median per function.
std::vector<Timing> time_interleaved(const std::vector<std::function<void()>>& fns, int repeats) {
  std::vector<std::vector<double>> us(fns.size());
  double timed_s = 0;
  const double budget = kTimeBudgetS * static_cast<double>(fns.size());
  for (int round = 0; round < std::max(repeats, 1) && (round < kMinRuns || timed_s < budget); ++round)
    for (size_t k = 0; k < fns.size(); ++k) {
      for (Timer settle; settle.elapsed_s() < kSettleS;) fns[k]();
      Timer t;
      fns[k]();
      timed_s += t.elapsed_s();
      us[k].push_back(t.elapsed_us());
    }
  std::vector<Timing> out;
  for (const auto& u : us) out.push_back({median(u), static_cast<int>(u.size())});
  return out;
}

// Memory that is not initialised by the allocator (std::vector would zero 1 GiB first), on a
// 64-byte line as torch allocates its tensors (new float[] gives 16 bytes), so that the kernels
// and their peers see rows that start at the same offsets within a cache line.
struct Buffer {
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], Free> data;
  explicit Buffer(int64_t n) : data(new (std::align_val_t{64}) float[static_cast<size_t>(n)]) {}
  float* get() const { return data.get(); }
};

// The copy ceiling: a copy of `bytes` (src and dst each) over the pool's threads, with the
// same split as the kernels' rows (one contiguous half per thread at -t 2), by two methods:
// memcpy, and copy_stream (streaming stores: no read for ownership of dst, which matters once
// the threads together reach the memory's bandwidth; copy_stream.h). The ceiling is the
// faster; both are reported. Both buffers are written first on the thread that later copies
// them (pages faulted in and placed before any timing), then one untimed copy by each method,
// then kCopyRuns timed ones by each, alternating, so that both see the same load. Each run
// also sums the copying threads' CPU time (CLOCK_THREAD_CPUTIME_ID): cpu_share = CPU time /
// (threads x wall), 1.0 when every thread had its core for the whole copy. On a machine shared
// with other processes a thread that is descheduled stretches the wall time without any change
// in bandwidth (at cpu_share 0.5 a copy reads half its real rate), so a method's figure is its
// best run, not the median: load can only slow a copy down.
struct CopyMethod {
  double best_gbps = 0, median_gbps = 0, cpu_share = 0;  // cpu_share of the best run
};
struct CopyCeiling {
  CopyMethod by_memcpy, by_stream;
  int runs = 0;  // per method
  double best_gbps() const { return std::max(by_memcpy.best_gbps, by_stream.best_gbps); }
  const char* best_method() const { return by_stream.best_gbps > by_memcpy.best_gbps ? "copy_stream" : "memcpy"; }
};
constexpr int kCopyRuns = 9;
constexpr int64_t kCopyGrain = int64_t{1} << 16;  // floats; the bench's copy rows use it too

std::string describe(const CopyMethod& c) {
  return fmt::format("median {:.2f}, best {:.2f} GB/s, CPU share of the best run {:.2f}", c.median_gbps,
                     c.best_gbps, c.cpu_share);
}

using CopyFn = void (*)(const float* src, float* dst, int64_t n);

void memcpy_floats(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// The two copy methods, by the name of their rows in the report (y = x, the same bytes as
// the shape: no softmax, so neither verified nor plotted).
struct CopyRow {
  const char* name;
  CopyFn copy;
};
constexpr CopyRow kCopyRows[] = {{"memcpy", memcpy_floats}, {"memcpy-stream", cpu::copy_stream}};

bool is_copy_row(const std::string& kernel) {
  return std::any_of(std::begin(kCopyRows), std::end(kCopyRows), [&](const CopyRow& r) { return kernel == r.name; });
}

double thread_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

CopyCeiling measure_copy(ThreadPool& pool, int64_t bytes) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  Buffer src(n), dst(n);
  pool.parallel_for(n, [&](int64_t b, int64_t e) {  // touch every page on the thread that copies it
    std::fill(src.get() + b, src.get() + e, 1.0f);
    std::fill(dst.get() + b, dst.get() + e, 0.0f);
  }, kCopyGrain);
  std::mutex m;
  double cpu = 0;
  // One timed copy by `method` over the pool: GB/s (read + write), and its cpu_share.
  auto copy = [&](CopyFn method) {
    cpu = 0;
    Timer t;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      const double c0 = thread_cpu_s();
      method(src.get() + b, dst.get() + b, e - b);
      const double c = thread_cpu_s() - c0;
      std::lock_guard<std::mutex> lock(m);
      cpu += c;
    }, kCopyGrain);
    const double s = t.elapsed_s();
    return std::pair{2.0 * static_cast<double>(bytes) / (s * 1e9), cpu / (s * pool.size())};
  };
  CopyCeiling out;
  out.runs = kCopyRuns;
  struct Timed {
    CopyFn method;
    CopyMethod* result;
    std::vector<double> gbps;
  };
  Timed timed[] = {{memcpy_floats, &out.by_memcpy, {}}, {cpu::copy_stream, &out.by_stream, {}}};
  for (Timed& t : timed) copy(t.method);  // untimed
  for (int r = 0; r < kCopyRuns; ++r) {
    for (Timed& t : timed) {
      const auto [g, share] = copy(t.method);
      t.gbps.push_back(g);
      if (g > t.result->best_gbps) {
        t.result->best_gbps = g;
        t.result->cpu_share = share;
      }
    }
  }
  for (Timed& t : timed) t.result->median_gbps = median(t.gbps);
  return out;
}

// exp_poly throughput (exps per second) over the pool's threads on an L1-resident array: the
// CPU's "exp unit" ceiling for the roofline.
double measure_exp_rate(ThreadPool& pool) {
  constexpr int64_t kN = 4096, kReps = 2000;
  const int threads = pool.size();
  std::vector<std::vector<float>> xs(threads, std::vector<float>(kN)), ys = xs;
  for (int t = 0; t < threads; ++t) fill_uniform(xs[t].data(), kN, 99 + t);
  for (auto& x : xs)
    for (float& v : x) v = -std::abs(v);
  const Isa isa = active_isa();
  const Timing t = time_runs(
      [&] {
        pool.parallel_for(threads, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            for (int r = 0; r < kReps; ++r) cpu::exp_poly(isa, xs[i].data(), ys[i].data(), kN);
        });
      },
      2, 9);
  return static_cast<double>(threads) * kN * kReps / (t.us * 1e-6);
}

double cpu_ghz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return std::stod(line.substr(colon + 1)) / 1000.0;
    }
  return 0.0;
}

// The peers script's answer: {"torch_version", "results": [{"peer", "B", "V", "time_us",
// "runs"}], "notes": [...]}; nullopt (and a note) when it could not run.
std::optional<nlohmann::json> run_peers(const BenchSoftmaxOptions& o, int threads, Report& report) {
  const std::string args = fmt::format("{} --device {} --threads {} --shapes {} --seed {} --json",
                                       peer_script("softmax_peers.py"), o.device, threads, shapes_arg(o.shapes), o.seed);
  return run_json(peer_command(o.peers, args), "peers", report);
}

// Every element written (no NaN left from the poison; inputs are finite) and a few rows
// against the reference.
void verify_output(const std::string& kernel, const float* x, const float* y, int64_t B, int64_t V) {
  const int64_t n = B * V;
  if (n == 0) return;
  for (int64_t i = 0; i < n; ++i)
    MINIGPT_CHECK(std::isfinite(y[i]), "bench softmax: {} left y[{}] = {} at ({}, {})", kernel, i, y[i], B, V);
  std::vector<float> ref(static_cast<size_t>(V));
  for (int64_t r : {int64_t{0}, B / 2, B - 1}) {
    cpu::softmax_reference(x + r * V, ref.data(), 1, V);
    for (int64_t c = 0; c < V; ++c) {
      const double d = std::abs(static_cast<double>(y[r * V + c]) - ref[c]);
      MINIGPT_CHECK(d <= 1e-4 * ref[c] + 1e-30, "bench softmax: {} row {} col {}: {} vs reference {}",
                    kernel, r, c, y[r * V + c], ref[c]);
    }
  }
}

}  // namespace

void bench_softmax_cpu(const BenchSoftmaxOptions& options, Report& report) {
  ThreadPool pool(options.threads);
  const Isa isa = active_isa();

  // Peers first: the Python process and ours never hold the big buffers at the same time.
  std::map<std::pair<int64_t, int64_t>, double> torch_us;
  std::vector<SoftmaxPeerRow> peer_rows;
  if (options.peers.enabled) {
    if (auto j = run_peers(options, options.threads, report)) {
      report.set_meta("torch", peer_torch_version(*j));
      peer_rows = softmax_peer_rows(*j, "peers", report);
      for (const SoftmaxPeerRow& r : peer_rows)
        if (r.peer == "torch.softmax") torch_us[{r.B, r.V}] = r.time_us;
    }
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }

  const int64_t copy_bytes = options.copy_mib << 20;
  report.set_meta("loadavg_at_start", loadavg());
  const CopyCeiling copy_before = measure_copy(pool, copy_bytes);
  const double exp_rate = measure_exp_rate(pool);

  struct Kernel {
    std::string name;
    std::function<void(const float*, float*, int64_t, int64_t)> run;
  };
  // naive and fused are one-thread kernels: the bench splits rows over the same pool.
  auto rows_split = [&pool](auto fn) {
    return [&pool, fn](const float* x, float* y, int64_t B, int64_t V) {
      pool.parallel_for(B, [&](int64_t b, int64_t e) { fn(x + b * V, y + b * V, e - b, V); },
                        std::max<int64_t>(1, (int64_t{1} << 16) / V));
    };
  };
  std::vector<Kernel> kernels = {
      {"naive", rows_split([](const float* x, float* y, int64_t b, int64_t v) { cpu::softmax_naive(x, y, b, v); })},
      {"fused", rows_split([](const float* x, float* y, int64_t b, int64_t v) { cpu::softmax_fused(x, y, b, v); })},
      {"simd", [&pool](const float* x, float* y, int64_t B, int64_t V) { cpu::softmax_simd(x, y, B, V, pool); }},
  };
  // Not softmaxes: y = x over the same threads by each copy method of the ceiling (memcpy,
  // copy_stream), timed round-robin with the kernels, so that a shape's softmax rows can be
  // read against copies of the same bytes made under the same load (frac_of_copy still uses
  // the 1 GiB copies).
  for (const CopyRow& row : kCopyRows)
    kernels.push_back({row.name, [&pool, copy = row.copy](const float* x, float* y, int64_t B, int64_t V) {
                         pool.parallel_for(B * V, [&](int64_t b, int64_t e) { copy(x + b, y + b, e - b); },
                                           kCopyGrain);
                       }});
  if (isa == Isa::Avx512 && cpu_supports(Isa::Avx2))
    kernels.push_back({"simd-avx2", [&pool](const float* x, float* y, int64_t B, int64_t V) {
                         cpu::softmax_simd_with(Isa::Avx2, cpu::SimdMode::Auto, cpu::SimdMode::Auto, x, y, B, V, pool);
                       }});
  // --simd-modes: simd with its store mode forced either way (kStreamBytes in softmax.h) and
  // without its prefetch (on by default), timed in the same rounds as the default.
  struct ForcedMode {
    const char* name;
    cpu::SimdMode stream, prefetch;
  };
  constexpr ForcedMode kForcedModes[] = {{"simd stream=on", cpu::SimdMode::On, cpu::SimdMode::Auto},
                                         {"simd stream=off", cpu::SimdMode::Off, cpu::SimdMode::Auto},
                                         {"simd prefetch=off", cpu::SimdMode::Auto, cpu::SimdMode::Off}};
  if (options.simd_modes)
    for (const ForcedMode& m : kForcedModes)
      kernels.push_back({m.name, [&pool, isa, m](const float* x, float* y, int64_t B, int64_t V) {
                           cpu::softmax_simd_with(isa, m.stream, m.prefetch, x, y, B, V, pool);
                         }});

  struct Row {
    std::string kernel;
    int64_t B, V;
    int runs;
    double us;
  };
  std::vector<Row> rows;
  for (const auto& [B, V] : options.shapes) {
    const int64_t n = B * V;
    Buffer x(std::max<int64_t>(n, 1)), y(std::max<int64_t>(n, 1));
    pool.parallel_for(B, [&](int64_t b, int64_t e) {  // first touch on the threads that use it
      fill_uniform(x.get() + b * V, (e - b) * V, options.seed + static_cast<uint64_t>(b));
    });
    // Each kernel once on a poisoned y, checked (every element written, rows against the
    // reference), then --warmup calls; then all of them timed round-robin.
    std::vector<std::function<void()>> calls;
    for (const Kernel& k : kernels) {
      std::fill(y.get(), y.get() + n, std::numeric_limits<float>::quiet_NaN());
      k.run(x.get(), y.get(), B, V);
      if (!is_copy_row(k.name)) verify_output(k.name, x.get(), y.get(), B, V);
      calls.push_back([&k, &x, &y, B = B, V = V] { k.run(x.get(), y.get(), B, V); });
      Timer warm;
      for (int i = 0; i < options.warmup && warm.elapsed_s() < kTimeBudgetS / 2; ++i) calls.back()();
    }
    const std::vector<Timing> t = time_interleaved(calls, options.repeats);
    for (size_t k = 0; k < kernels.size(); ++k) rows.push_back({kernels[k].name, B, V, t[k].runs, t[k].us});
    for (const SoftmaxPeerRow& r : peer_rows)
      if (r.B == B && r.V == V) rows.push_back({r.peer, B, V, r.runs, r.time_us});
  }
  report.set_meta("loadavg_at_end", loadavg());
  // The ceiling: the best copy before or after the kernels (load from other processes can
  // only slow a copy down).
  const CopyCeiling copy_after = measure_copy(pool, copy_bytes);
  const double copy_gbps = std::max(copy_before.best_gbps(), copy_after.best_gbps());
  const char* copy_method =
      (copy_before.best_gbps() >= copy_after.best_gbps() ? copy_before : copy_after).best_method();

  const double ghz = cpu_ghz();
  const int lanes = isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 1;
  // Two FMA units per core, 2 FLOPs per FMA (Sapphire Rapids and most AVX-512 server cores).
  const double fma_peak = options.threads * ghz * 1e9 * lanes * 2 * 2;
  report.set_meta("device", "cpu");
  report.set_meta("isa", isa_name(isa));
  report.set_meta("copy_bandwidth_GBps", copy_gbps);
  report.set_meta("copy_method", copy_method);
  auto method_json = [](const CopyMethod& c, int runs) {
    return nlohmann::json{{"best_GBps", c.best_gbps}, {"median_GBps", c.median_gbps}, {"runs", runs},
                          {"cpu_share_of_best", c.cpu_share}};
  };
  for (const auto& [key, c] : {std::pair{"copy_before", copy_before}, std::pair{"copy_after", copy_after}})
    report.set_meta(key, nlohmann::json{{"memcpy", method_json(c.by_memcpy, c.runs)},
                                        {"copy_stream", method_json(c.by_stream, c.runs)}});
  report.set_meta("copy_bytes", copy_bytes);
  report.set_meta("roofline", nlohmann::json{
      {"flops_per_element", kFlopsPerElement},
      {"bytes_per_element", kBytesPerElement},
      {"flop_counting", "max 1 + sub 1 + exp 1 (one special-function op) + sum 1 + div 1 = 5 "
                        "FLOP per element; bytes = read x + write y = 8 per element"},
      {"copy_bandwidth_GBps", copy_gbps},
      {"fma_peak_GFLOPs", fma_peak / 1e9},
      {"fma_peak_source", fmt::format("{} threads x {:.2f} GHz (/proc/cpuinfo) x {} lanes x 2 FMA "
                                      "units x 2 FLOP", options.threads, ghz, lanes)},
      {"exp_rate_Gps", exp_rate / 1e9},
      {"exp_rate_source", fmt::format("measured: exp_poly ({}) on L1-resident arrays, {} threads",
                                      isa_name(isa), options.threads)},
      {"exp_poly_vector_ops", 12},  // AVX-512 or AVX2 vector ops per vector of exps (softmax.h)
      {"cpu_GHz", ghz},
  });

  for (const Row& r : rows) {
    const double bytes = kBytesPerElement * static_cast<double>(r.B * r.V);
    const double gbps = r.us > 0 ? bytes / (r.us * 1e3) : 0.0;
    nlohmann::json vs = nullptr;
    if (auto it = torch_us.find({r.B, r.V}); it != torch_us.end() && r.us > 0) vs = it->second / r.us;
    report.add_row({r.kernel, r.B, r.V, bytes / 1e6, options.threads, r.runs, r.us, gbps,
                    gbps / copy_gbps, vs});
  }
  report.add_note(fmt::format(
      "time_us: median over `runs` calls in one process, the kernels of a shape timed round-robin "
      "(at least {} rounds, at most --repeats or ~{} s per kernel; each timed call after >= {:g} ms of "
      "untimed calls of the same kernel, its steady state) after up to --warmup untimed "
      "calls; inputs uniform in [-8, 8); every output poisoned and checked first. GB/s = 2 * B * V "
      "* 4 bytes / time. frac_of_copy: over the faster of two copies of {} MiB (src and dst each, "
      "{}, pre-faulted, same split) on the same {} thread(s), memcpy and copy_stream "
      "(streaming stores): {:.2f} GB/s (read + write, {}). Each the best of {} timed runs, "
      "alternating, before the kernels (memcpy {}; copy_stream {}) and {} after (memcpy {}; "
      "copy_stream {}); CPU share < 1 means other processes held our cores. The memcpy and "
      "memcpy-stream rows: the same bytes as the shape by each method, timed with the kernels. "
      "vs_torch = torch.softmax time / this time (> 1: faster); the peers run in a subprocess "
      "just before, same threads.",
      kMinRuns, kTimeBudgetS, kSettleS * 1e3, copy_bytes >> 20,
      options.copy_mib >= 1024 ? ">3x the LLC" : "set by --copy-mib: may fit a cache, so not the memory's rate",
      options.threads, copy_gbps, copy_method,
      copy_before.runs, describe(copy_before.by_memcpy), describe(copy_before.by_stream), copy_after.runs,
      describe(copy_after.by_memcpy), describe(copy_after.by_stream)));
  report.add_note(fmt::format("simd streams its stores (non-temporal) when B * V * 4 >= {} MiB; "
                              "naive and fused split rows over the same pool.",
                              cpu::kStreamBytes >> 20));
}

void add_bench_softmax_command(CLI::App& bench, GlobalOptions& global) {
  CLI::App* cmd = bench.add_subcommand("softmax", "Softmax kernels against memcpy/copy bandwidth and torch");
  auto options = std::make_shared<BenchSoftmaxOptions>();
  auto format = std::make_shared<std::string>("md");
  auto shapes = std::make_shared<std::string>();
  cmd->add_option("--device", options->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("-o,--output", *format, "md, json or csv");
  cmd->add_option("--shapes", *shapes, "BxV list, e.g. 64x600,4096x32000 (default: the issue's sweep)");
  add_peer_options(cmd, options->peers, "bench/peers/softmax_peers.py");
  cmd->add_flag("--simd-modes", options->simd_modes,
                "CPU: also time simd with streaming stores forced on and off, and without prefetch");
  cmd->add_option("--warmup", options->warmup, "untimed calls before timing")->check(CLI::Range(0, 1000));
  cmd->add_option("--repeats", options->repeats, "timed calls at most (CPU: also ~1 s per row)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--copy-mib", options->copy_mib,
                  "CPU: MiB of each buffer of the copy ceiling (default 1024, well beyond the LLC; smaller "
                  "sizes measure a cache, for quick tests)")
      ->check(CLI::Range(1, 65536));
  cmd->add_flag("--retune", options->retune, "CUDA: ignore the autotune cache");
  cmd->add_flag("--tune-log", options->tune_log, "CUDA: print every candidate the autotuner times (stderr)");
  cmd->add_option("-s,--seed", options->seed, "input seed");
  cmd->callback([options, format, shapes, &global] {
    const ReportFormat fmt_out = parse_report_format(*format);
    options->threads = global.resolved_threads();
    options->shapes = shapes->empty() ? default_softmax_shapes() : parse_shapes(*shapes);
    Report report("bench softmax (" + options->device + ")", kSoftmaxColumns, options->threads);
    if (options->device == "cuda") {
      bench_softmax_cuda(*options, report);
    } else {
      bench_softmax_cpu(*options, report);
    }
    std::fputs(report.render(fmt_out).c_str(), stdout);
  });
}

}  // namespace minigpt::cli
