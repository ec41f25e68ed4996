// `minigpt bench softmax`: the options both device paths share and the two entry points.
// cmd_bench_softmax.cpp parses the command line, runs the CPU path itself and calls
// bench_softmax_cuda() (bench_softmax_cuda.cpp) for --device cuda; both fill one Report.
#pragma once

#include "cli/peers.h"
#include "core/report.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace minigpt::cli {

struct BenchSoftmaxOptions {
  std::string device = "cpu";                        // cpu | cuda
  std::vector<std::pair<int64_t, int64_t>> shapes;   // (B, V); the default sweep when empty
  int threads = 1;
  int warmup = 3;
  int repeats = 100;
  bool retune = false;      // CUDA: ignore the autotune cache
  bool tune_log = false;    // CUDA: the sweep prints every candidate's times (stderr)
  PeerOptions peers;        // bench/peers/softmax_peers.py, run in the same command
  bool simd_modes = false;  // CPU: also time simd with its store mode and prefetch forced
  uint64_t seed = 42;
  int64_t copy_mib = 1024;  // CPU: each buffer of the copy ceiling, 1 GiB: >3x a 300 MiB LLC
};

// The sweep: B in {64, 512, 4096, 32768, 262144} at V = 600, (4096, 32000), (2048, 50257).
std::vector<std::pair<int64_t, int64_t>> default_softmax_shapes();

// One timing of a softmax peer (softmax_peers.py or triton_softmax graph-bench answers
// {"results": [{"peer", "B", "V", "time_us", "runs"}, ...]}).
struct SoftmaxPeerRow {
  std::string peer;
  int64_t B = 0, V = 0;
  double time_us = 0;
  int runs = 0;
};

// The results of a peer's answer that carry every field with its type, a positive time and
// B >= 0, V >= 1; any other is left out, and a note says how many.
std::vector<SoftmaxPeerRow> softmax_peer_rows(const nlohmann::json& answer, const std::string& what, Report& report);

// Benchmark inputs: uniform in [-8, 8) (logits-like, never zeros) from a xorshift stream,
// fast enough for 157M elements; the same seed gives the same inputs on both devices.
void fill_uniform(float* x, int64_t n, uint64_t seed);

// Fills `report` with one row per (kernel, shape). Throws Error when the device is missing.
void bench_softmax_cpu(const BenchSoftmaxOptions& options, Report& report);
void bench_softmax_cuda(const BenchSoftmaxOptions& options, Report& report);

}  // namespace minigpt::cli
