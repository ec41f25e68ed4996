// bench_softmax_cuda(): the --device cuda half of `minigpt bench softmax` (the CPU half and the
// command line are in cmd_bench_softmax.cpp). Compiled in every build; without CUDA it throws.
//
// Per shape (B, V): inputs uniform in [-8, 8) from --seed (never zeros), a CPU double reference
// (cpu::softmax_reference); the fused kernel's config from the autotuner (cache or sweep);
// then for naive, smem and fused: y poisoned with NaN, one run, every element checked against
// the reference (|d| <= 1e-6 + 1e-4 |ref|), then --warmup untimed launches and --repeats timed
// launches, each alone between two CUDA events with L2 flushed before it (a memset of 2x the
// L2 size, outside the events); time = median. Small shapes (<= 64 MB moved) also run in
// graph mode: 100 launches captured into one CUDA graph, time per launch = graph time / 100
// (median of 5 graph launches, each waited for; L2 not flushed inside the graph). Ceiling:
// cudaMemcpyAsync device-to-device of 1 GiB, bytes read + written over the median time.
// Peers: bench/peers/softmax_peers.py (torch.softmax, torch.compile, Triton; L2 flushed) and
// `python -m minigpt.triton_softmax graph-bench` (torch.softmax and Triton in graph mode), run
// before our buffers exist. Both also time our fused kernel (rows "minigpt fused" and "minigpt
// fused graph") in their own process, on the same tensors, alternating with the peers' calls:
// the times of tiny launches drift with the GPU's state (~12% within one process at (64, 600)),
// so those rows are the like-for-like comparison with Triton; ours here are the same kernel.
#include "cli/bench_softmax.h"
#include "core/error.h"
#include "minigpt/build_info.h"

#if MINIGPT_WITH_CUDA
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/autotune.h"
#include "kernels/cuda/captured_launches.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#endif

namespace minigpt::cli {

#if MINIGPT_WITH_CUDA
namespace {

constexpr int64_t kCopyBytes = int64_t{1} << 30;     // 1 GiB each way, ~17x the H200's L2
constexpr double kGraphMaxBytes = 64e6;              // graph mode for shapes moving <= 64 MB
constexpr int kGraphLaunches = 100;
constexpr double kFlopsPerElement = 5.0;             // max, sub, exp, sum, scale (as the CPU)
constexpr double kBytesPerElement = 8.0;             // read x + write y

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { MINIGPT_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 4))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(ptr); }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MINIGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

struct Events {
  std::vector<cudaEvent_t> start, stop;
  explicit Events(int n) : start(n), stop(n) {
    for (int i = 0; i < n; ++i) {
      MINIGPT_CUDA_CHECK(cudaEventCreate(&start[i]));
      MINIGPT_CUDA_CHECK(cudaEventCreate(&stop[i]));
    }
  }
  ~Events() {
    for (auto e : start) cudaEventDestroy(e);
    for (auto e : stop) cudaEventDestroy(e);
  }
  std::vector<double> elapsed_us() const {
    std::vector<double> us;
    for (size_t i = 0; i < start.size(); ++i) {
      float ms = 0;
      MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
      us.push_back(1e3 * ms);
    }
    return us;
  }
};



std::string shapes_arg(const std::vector<std::pair<int64_t, int64_t>>& shapes, double max_bytes) {
  std::string s;
  for (const auto& [b, v] : shapes)
    if (b > 0 && kBytesPerElement * static_cast<double>(b * v) <= max_bytes)
      s += fmt::format("{}{}x{}", s.empty() ? "" : ",", b, v);
  return s;
}

// Median time (us) of single launches, L2 flushed before each, outside the events.
double time_flushed(const std::function<void(cudaStream_t)>& launch, int warmup, int repeats,
                    void* flush, size_t flush_bytes, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) launch(stream);
  Events ev(repeats);
  for (int i = 0; i < repeats; ++i) {
    MINIGPT_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start[i], stream));
    launch(stream);
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop[i], stream));
  }
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return median(ev.elapsed_us());
}

// Time per launch (us) with kGraphLaunches launches captured into one graph; median of 5.
// Each replay is waited for before the next is launched, as the peers' graph mode does
// (minigpt.triton_softmax.graph_times_us, which takes the median of 7 replays alternating
// between its kernels; on the H200 waiting or not changed the time by < 1%: 1.466 vs 1.454 us
// per launch at (64, 600)).
double time_graph(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream) {
  const cuda::CapturedLaunches graph(launch, kGraphLaunches, stream);
  graph.replay(stream);  // warm-up
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  constexpr int kReps = 5;
  Events ev(kReps);
  for (int i = 0; i < kReps; ++i) {
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start[i], stream));
    graph.replay(stream);
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop[i], stream));
    MINIGPT_CUDA_CHECK(cudaEventSynchronize(ev.stop[i]));
  }
  return median(ev.elapsed_us()) / kGraphLaunches;
}

// Every element written and close to the reference; returns the max abs difference.
double verify(const std::string& kernel, const std::vector<float>& y, const std::vector<float>& ref,
              int64_t B, int64_t V) {
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = std::abs(static_cast<double>(y[i]) - ref[i]);
    MINIGPT_CHECK(std::isfinite(y[i]) && d <= 1e-6 + 1e-4 * std::abs(ref[i]),
                  "bench softmax: {} at ({}, {}) element {} (row {}): {} vs reference {}", kernel,
                  B, V, i, static_cast<int64_t>(i) / V, y[i], ref[i]);
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace
#endif

void bench_softmax_cuda(const BenchSoftmaxOptions& options, Report& report) {
#if !MINIGPT_WITH_CUDA
  (void)options;
  (void)report;
  MINIGPT_FAIL("bench softmax --device cuda: built without CUDA (configure with -DMINIGPT_CUDA=ON)");
#else
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    MINIGPT_FAIL("bench softmax --device cuda: no CUDA GPU visible");
  }
  const std::vector<std::string> columns = report.to_json()["columns"].get<std::vector<std::string>>();

  // ---- peers, before our buffers take the GPU's memory
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, SoftmaxPeerRow>> peers;  // peer -> shape -> row
  if (options.peers.enabled) {
    // python/ for the peers, <build>/python for the C++ module (our kernel timed beside them).
    const std::string build_python = std::string(MINIGPT_BINARY_DIR) + "/python";
    const std::string all = shapes_arg(options.shapes, std::numeric_limits<double>::infinity());
    const std::string args = fmt::format("{} --device cuda --threads {} --shapes {} --seed {} --warmup {} "
                                         "--repeats {} --json", peer_script("softmax_peers.py"), options.threads,
                                         all, options.seed, options.warmup, options.repeats);
    if (auto j = run_json(peer_command(options.peers, args, build_python), "peers", report)) {
      report.set_meta("torch", peer_torch_version(*j));
      for (const SoftmaxPeerRow& r : softmax_peer_rows(*j, "peers", report)) peers[r.peer][{r.B, r.V}] = r;
    }
    const std::string small = shapes_arg(options.shapes, kGraphMaxBytes);
    if (!small.empty()) {
      const std::string graph_args = fmt::format("-m minigpt.triton_softmax graph-bench --shapes {} --seed {} "
                                                 "--launches {}", small, options.seed, kGraphLaunches);
      if (auto j = run_json(peer_command(options.peers, graph_args, build_python), "graph peers", report)) {
        if (j->contains("triton_autotune")) report.set_meta("triton_autotune", (*j)["triton_autotune"]);
        for (const SoftmaxPeerRow& r : softmax_peer_rows(*j, "graph peers", report)) peers[r.peer][{r.B, r.V}] = r;
      }
    }
  } else {
    report.add_note("peers: skipped (--no-peers)");
  }

  // ---- the device and its ceilings
  int dev = 0;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  MINIGPT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int clock_khz = 0, runtime = 0, driver = 0;
  MINIGPT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  MINIGPT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  MINIGPT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  Stream stream;

  double copy_gbps = 0;
  {
    DeviceBuffer a(kCopyBytes), b(kCopyBytes);
    MINIGPT_CUDA_CHECK(cudaMemsetAsync(a.ptr, 1, kCopyBytes, stream.s));
    auto copy = [&](cudaStream_t s) {
      MINIGPT_CUDA_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, kCopyBytes, cudaMemcpyDeviceToDevice, s));
    };
    for (int i = 0; i < 2; ++i) copy(stream.s);
    Events ev(10);
    for (int i = 0; i < 10; ++i) {
      MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start[i], stream.s));
      copy(stream.s);
      MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop[i], stream.s));
    }
    MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    copy_gbps = 2.0 * static_cast<double>(kCopyBytes) / (median(ev.elapsed_us()) * 1e3);
  }
  const double ghz = clock_khz / 1e6;
  // Hopper SM: 128 fp32 lanes (FMA = 2 FLOP), 16 SFU lanes (exp2 is one SFU op per element).
  const double fma_peak = prop.multiProcessorCount * 128.0 * 2.0 * ghz * 1e9;
  const double sfu_rate = prop.multiProcessorCount * 16.0 * ghz * 1e9;
  const size_t flush_bytes = 2 * static_cast<size_t>(prop.l2CacheSize);
  DeviceBuffer flush(flush_bytes);

  report.set_meta("device", "cuda");
  report.set_meta("gpu", {{"model", prop.name}, {"compute_capability", fmt::format("{}.{}", prop.major, prop.minor)},
                          {"sm_count", prop.multiProcessorCount}, {"l2_bytes", prop.l2CacheSize},
                          {"clock_MHz", clock_khz / 1000}, {"cuda_runtime", runtime}, {"cuda_driver", driver}});
  report.set_meta("copy_bandwidth_GBps", copy_gbps);
  report.set_meta("copy_bytes", kCopyBytes);
  report.set_meta("l2_flush", fmt::format("cudaMemsetAsync of {} MiB (2x L2) before each timed launch, outside the events",
                                          flush_bytes >> 20));
  report.set_meta("roofline", nlohmann::json{
      {"flops_per_element", kFlopsPerElement},
      {"bytes_per_element", kBytesPerElement},
      {"flop_counting", "max 1 + sub 1 + exp 1 (one SFU op) + sum 1 + scale 1 = 5 FLOP per "
                        "element; bytes = read x + write y = 8 per element"},
      {"copy_bandwidth_GBps", copy_gbps},
      {"fma_peak_GFLOPs", fma_peak / 1e9},
      {"fma_peak_source", fmt::format("{} SMs x 128 fp32 lanes x 2 FLOP x {:.3f} GHz (cudaDevAttrClockRate)",
                                      prop.multiProcessorCount, ghz)},
      {"exp_rate_Gps", sfu_rate / 1e9},
      {"exp_rate_source", fmt::format("{} SMs x 16 SFU lanes (MUFU.EX2) x {:.3f} GHz", prop.multiProcessorCount, ghz)},
      {"gpu_GHz", ghz},
  });

  auto add_row = [&](const std::string& kernel, int64_t B, int64_t V, int runs, double us,
                     const std::string& torch_peer) {
    const double bytes = kBytesPerElement * static_cast<double>(B * V);
    const double gbps = us > 0 ? bytes / (us * 1e3) : 0.0;
    nlohmann::json vs = nullptr;
    if (auto p = peers.find(torch_peer); p != peers.end())
      if (auto r = p->second.find({B, V}); r != p->second.end() && us > 0) vs = r->second.time_us / us;
    const std::map<std::string, nlohmann::json> cells = {
        {"kernel", kernel}, {"B", B}, {"V", V}, {"MB", bytes / 1e6}, {"threads", nullptr},
        {"runs", runs}, {"time_us", us}, {"GB/s", gbps}, {"frac_of_copy", gbps / copy_gbps},
        {"vs_torch", vs}};
    std::vector<nlohmann::json> row;
    for (const auto& c : columns) row.push_back(cells.count(c) ? cells.at(c) : nlohmann::json());
    report.add_row(std::move(row));
  };

  ThreadPool pool(options.threads);
  cuda::AutotuneOptions tune;
  tune.cache_path = cuda::default_autotune_cache_path();
  tune.retune = options.retune;
  tune.log_candidates = options.tune_log;
  tune.log = &std::cerr;
  nlohmann::json choices = nlohmann::json::object();
  double worst_err = 0;

  for (const auto& [B, V] : options.shapes) {
    const std::string shape = fmt::format("({}, {})", B, V);
    if (B == 0) {  // nothing to launch; the launchers return at once
      cuda::softmax_fused(nullptr, nullptr, 0, V, cuda::fused_default_config(V, cuda::fused_limits()), stream.s);
      report.add_note(fmt::format("{}: B = 0 launches nothing; no row", shape));
      continue;
    }
    const int64_t n = B * V;
    std::vector<float> hx(static_cast<size_t>(n)), ref(static_cast<size_t>(n)), hy(static_cast<size_t>(n));
    pool.parallel_for(B, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) fill_uniform(hx.data() + r * V, V, options.seed * 1000003 + static_cast<uint64_t>(r));
      cpu::softmax_reference(hx.data() + b * V, ref.data() + b * V, e - b, V);
    });
    DeviceBuffer x(static_cast<size_t>(n) * 4), y(static_cast<size_t>(n) * 4);
    MINIGPT_CUDA_CHECK(cudaMemcpy(x.ptr, hx.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));

    const cuda::AutotuneResult tuned = cuda::autotune_fused(x.f(), B, V, tune, stream.s);
    choices[shape] = {{"config", tuned.config.name()}, {"sweep_us", tuned.us}, {"from_cache", tuned.from_cache},
                      {"candidates", tuned.candidates}};

    struct Kernel {
      std::string name;
      std::function<void(cudaStream_t)> launch;
    };
    const std::vector<Kernel> kernels = {
        {"naive", [&](cudaStream_t s) { cuda::softmax_naive(x.f(), y.f(), B, V, s); }},
        {"smem", [&](cudaStream_t s) { cuda::softmax_smem(x.f(), y.f(), B, V, s); }},
        {"fused", [&](cudaStream_t s) { cuda::softmax_fused(x.f(), y.f(), B, V, tuned.config, s); }},
    };
    const bool graph = kBytesPerElement * static_cast<double>(n) <= kGraphMaxBytes;
    for (const Kernel& k : kernels) {
      MINIGPT_CUDA_CHECK(cudaMemsetAsync(y.ptr, 0xff, static_cast<size_t>(n) * 4, stream.s));  // NaN poison
      k.launch(stream.s);
      MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream.s));
      MINIGPT_CUDA_CHECK(cudaMemcpy(hy.data(), y.ptr, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost));
      worst_err = std::max(worst_err, verify(k.name, hy, ref, B, V));
      const double us = time_flushed(k.launch, options.warmup, options.repeats, flush.ptr, flush_bytes, stream.s);
      add_row(k.name, B, V, options.repeats, us, "torch.softmax");
      if (graph) add_row(k.name + " graph", B, V, kGraphLaunches, time_graph(k.launch, stream.s), "torch.softmax graph");
    }
    for (const auto& [peer, rows] : peers) {
      if (auto r = rows.find({B, V}); r != rows.end()) {
        const bool is_graph = peer.find("graph") != std::string::npos;
        add_row(peer, B, V, r->second.runs, r->second.time_us, is_graph ? "torch.softmax graph" : "torch.softmax");
      }
    }
    std::cerr << fmt::format("bench softmax cuda {}: done\n", shape);
  }
  report.set_meta("fused_autotune", choices);
  report.set_meta("autotune_cache", tune.cache_path);
  report.add_note(fmt::format(
      "time_us: median of {} single launches between CUDA events, L2 flushed before each ({} MiB "
      "memset), after {} warm-ups; 'graph' rows: {} launches in one CUDA graph, time per launch "
      "(median of 5 graph launches, each waited for, L2 warm). Every kernel's output was poisoned with NaN and "
      "checked element by element against softmax_reference before timing (max |diff| {:.2e}). "
      "GB/s = 2 * B * V * 4 bytes / time; frac_of_copy over a 1 GiB device-to-device copy, "
      "{:.0f} GB/s (read + write). vs_torch = torch.softmax time (same mode) / this time.",
      options.repeats, flush_bytes >> 20, options.warmup, kGraphLaunches, worst_err, copy_gbps));
  for (const auto& [shape, c] : choices.items())
    report.add_note(fmt::format("fused {}: {}{}", shape, c["config"].get<std::string>(),
                                c["from_cache"].get<bool>() ? " (from the autotune cache)" : " (tuned now)"));
#endif
}

}  // namespace minigpt::cli
