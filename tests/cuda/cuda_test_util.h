// Helpers of the CUDA tests: whether a GPU is visible (tests skip, saying so, when not), a
// device buffer that copies to and from std::vector, and the max |a - b| of two float arrays
// (NaN counts as infinitely far, so NaN never passes).
#pragma once

#include "kernels/cuda/cuda_check.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace minigpt::cudatest {

inline bool gpu_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define REQUIRE_GPU() \
  if (!::minigpt::cudatest::gpu_visible()) GTEST_SKIP() << "no CUDA GPU visible"

// n elements of T on the device; from a vector, or poisoned (every byte 0xFF: NaN floats, -1
// ints), so that an element a kernel fails to write shows.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    MINIGPT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)));
    MINIGPT_CUDA_CHECK(cudaMemset(ptr_, 0xFF, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    MINIGPT_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> host() const {  // waits for the device
    MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(n_);
    MINIGPT_CUDA_CHECK(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return max_abs_diff(a.data(), b.data(), std::min(a.size(), b.size()));
}

}  // namespace minigpt::cudatest
