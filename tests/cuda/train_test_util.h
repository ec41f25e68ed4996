// Helpers of the CUDA training tests on top of cuda_test_util.h (GPU detection, DeviceArray):
// the CPU side's thread pool, the per-tensor relative difference the tolerances are stated in, and random data.
#pragma once

#include "core/thread_pool.h"
#include "cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace minigpt::cudatest {

inline ThreadPool& pool() {  // the CPU engine's side of the comparisons
  static ThreadPool p(2);
  return p;
}

// max |a - b| / max |b| over a tensor (NaN anywhere gives +inf): "within 1e-4 relative per
// tensor" of issue 14.
inline double rel_diff(const float* a, const float* b, size_t n) {
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  const double diff = max_abs_diff(a, b, n);
  return scale > 0.0 ? diff / scale : diff;
}
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rel_diff(a.data(), b.data(), std::min(a.size(), b.size()));
}

inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(gen);
  return x;
}

}  // namespace minigpt::cudatest
