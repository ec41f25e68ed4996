// Monotonic wall-clock timing and the statistics every benchmark reports.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace minigpt {

// Starts on construction; elapsed_*() reads std::chrono::steady_clock (never goes backwards).
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double elapsed_us() const { return elapsed_s() * 1e6; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Median of a sample (copied, so the caller's order is kept). Empty input gives 0.
inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  const size_t mid = xs.size() / 2;
  std::nth_element(xs.begin(), xs.begin() + static_cast<long>(mid), xs.end());
  const double hi = xs[mid];
  if (xs.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(xs.begin(), xs.begin() + static_cast<long>(mid)));
}

}  // namespace minigpt
