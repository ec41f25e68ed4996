// The fused softmax autotuner (see autotune.h).
#include "kernels/cuda/autotune.h"

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"
#include "minigpt/softmax_cuda_source_hash.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace minigpt::cuda {

namespace {

// Owns a device buffer; freed on scope exit even when a launch throws.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { MINIGPT_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    MINIGPT_CUDA_CHECK(cudaEventCreate(&start));
    MINIGPT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

// Microseconds per launch of `config`, the best of `timings`; +inf if the config fails to
// launch on this device (it is then skipped).
double time_config(const FusedConfig& config, const float* x, float* y, int64_t rows, int64_t cols,
                   const AutotuneOptions& options, cudaStream_t stream, EventPair& ev) {
  try {
    softmax_fused(x, y, rows, cols, config, stream);  // warm-up, and the launch check
    MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (const Error&) {
    cudaGetLastError();
    return std::numeric_limits<double>::infinity();
  }
  double best = std::numeric_limits<double>::infinity();
  for (int t = 0; t < options.timings; ++t) {
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    for (int i = 0; i < options.launches_per_timing; ++i)
      softmax_fused(x, y, rows, cols, config, stream);
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    MINIGPT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    best = std::min(best, 1e3 * ms / options.launches_per_timing);
  }
  return best;
}

}  // namespace

AutotuneKey autotune_key(int64_t rows, int64_t cols) {
  int dev = 0;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  MINIGPT_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  AutotuneKey k;
  k.gpu_name = p.name;
  k.cc_major = p.major;
  k.cc_minor = p.minor;
  MINIGPT_CUDA_CHECK(cudaRuntimeGetVersion(&k.cuda_runtime));
  MINIGPT_CUDA_CHECK(cudaDriverGetVersion(&k.cuda_driver));
  k.source_sha256 = kFusedSourceSha256;
  k.bucket = shape_bucket(rows, cols);
  return k;
}

AutotuneResult autotune_fused(const float* x, int64_t rows, int64_t cols,
                              const AutotuneOptions& options, cudaStream_t stream) {
  MINIGPT_CHECK(rows >= 1 && cols >= 1, "autotune: bad shape ({}, {})", rows, cols);
  const AutotuneKey key = autotune_key(rows, cols);
  AutotuneResult result;
  result.key = key.str();

  std::optional<AutotuneCache> cache;
  if (!options.cache_path.empty()) {
    cache = AutotuneCache::load(options.cache_path);
    if (!options.retune) {
      if (auto hit = cache->find(key)) {
        result.config = hit->config;
        result.us = hit->us;
        result.from_cache = true;
        if (options.log)
          *options.log << fmt::format("autotune {}: cached {} ({:.2f} us)\n", key.bucket,
                                      result.config.name(), result.us);
        return result;
      }
    }
  }

  const FusedLimits limits = fused_limits();
  const std::vector<FusedConfig> candidates = fused_candidates(cols, limits);
  DeviceBuffer y(static_cast<size_t>(rows * cols) * sizeof(float));
  EventPair ev;
  double best = std::numeric_limits<double>::infinity();
  FusedConfig winner = fused_default_config(cols, limits);
  for (const FusedConfig& c : candidates) {
    const double us = time_config(c, x, static_cast<float*>(y.ptr), rows, cols, options, stream, ev);
    ++result.candidates;
    if (us < best) {
      best = us;
      winner = c;
    }
  }
  MINIGPT_CHECK(best < std::numeric_limits<double>::infinity(),
                "autotune: no fused softmax config could launch for ({}, {})", rows, cols);
  result.config = winner;
  result.us = best;
  if (options.log)
    *options.log << fmt::format("autotune {}: {} ({:.2f} us, best of {} configs)\n", key.bucket,
                                winner.name(), best, result.candidates);
  if (cache) {
    cache->put(key, AutotuneEntry{winner, best, utc_now_iso8601()});
    cache->save();
  }
  return result;
}

}  // namespace minigpt::cuda
