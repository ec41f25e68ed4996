// `minigpt bench softmax`: the options both device paths share and the two entry points.
// cmd_bench_softmax.cpp parses the command line, runs the CPU path itself and calls
// bench_softmax_cuda() (bench_softmax_cuda.cpp) for --device cuda; both fill one Report.
#pragma once

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
  bool peers = true;        // run bench/peers/softmax_peers.py in the same command
  bool simd_modes = false;  // CPU: also time simd with its store mode and prefetch forced
  uint64_t seed = 42;
};

// The sweep: B in {64, 512, 4096, 32768, 262144} at V = 600, (4096, 32000), (2048, 50257).
std::vector<std::pair<int64_t, int64_t>> default_softmax_shapes();

// Runs a shell command (a peer script) and returns its stdout parsed as JSON, copying the
// object's "notes" into the report prefixed by `what`; nullopt, and a note saying why, when the
// command cannot start, fails or prints no JSON. The benchmark then leaves the peer cells empty.
std::optional<nlohmann::json> run_json(const std::string& cmd, const std::string& what, Report& report);

// Benchmark inputs: uniform in [-8, 8) (logits-like, never zeros) from a xorshift stream,
// fast enough for 157M elements; the same seed gives the same inputs on both devices.
void fill_uniform(float* x, int64_t n, uint64_t seed);

// Fills `report` with one row per (kernel, shape). Throws Error when the device is missing.
void bench_softmax_cpu(const BenchSoftmaxOptions& options, Report& report);
void bench_softmax_cuda(const BenchSoftmaxOptions& options, Report& report);

}  // namespace minigpt::cli
