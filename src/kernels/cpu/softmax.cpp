// The plain softmax versions: softmax_reference (double), softmax_naive (three float passes)
// and softmax_fused (online max and sum). The vectorised version is in softmax_simd.cpp and
// the per-ISA files; this file holds no intrinsics.
//
// How the special values fall out (design.md): with m the row max,
//   - a NaN makes exp(NaN - m) NaN, so the sum and every output are NaN;
//   - a +inf makes m = +inf and exp(inf - inf) = NaN, same outcome;
//   - an all -inf row has m = -inf and exp(-inf - -inf) = NaN: a NaN row (as torch.softmax);
//   - [1e30, 0, -1e30]: exp(0) = 1 exactly, exp(-1e30) = 0, sum 1, so [1, 0, 0] exactly.
// The fused version cannot rely on that arithmetic alone (its online rescaling skips the
// inf - inf), so it checks the row's max and sum explicitly before writing.
#include "kernels/cpu/softmax.h"

#include "core/error.h"

#include <cmath>
#include <limits>

namespace minigpt::cpu {

namespace {

void check_args(const float* x, float* y, int64_t rows, int64_t cols) {
  MINIGPT_CHECK(rows >= 0, "softmax: rows must be >= 0, got {}", rows);
  MINIGPT_CHECK(cols >= 1, "softmax: cols must be >= 1, got {}", cols);
  MINIGPT_CHECK(rows == 0 || (x != nullptr && y != nullptr), "softmax: null pointer with {} rows",
                rows);
}

}  // namespace

void softmax_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  check_args(x, y, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, static_cast<double>(xr[c]));  // NaN skipped
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(xr[c]) - m);  // NaN kept
    // Division after the loop: y may alias x, and every x must be read before the first write.
    for (int64_t c = 0; c < cols; ++c) yr[c] = static_cast<float>(std::exp(static_cast<double>(xr[c]) - m) / s);
  }
}

void softmax_naive(const float* x, float* y, int64_t rows, int64_t cols) {
  check_args(x, y, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;  // pass 1: max
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {                          // pass 2: exp into y, sum
      yr[c] = std::exp(xr[c] - m);
      s += yr[c];
    }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;                 // pass 3: scale
  }
}

void softmax_fused(const float* x, float* y, int64_t rows, int64_t cols) {
  check_args(x, y, rows, cols);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // Pass 1 (one read): m = running max, s = sum of exp(x - m), rescaled when m grows.
    float m = -kInf;
    double s = 0.0;
    bool nan = false;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = xr[c];
      if (v > m) {
        // m = -inf at the start: exp(-inf) = 0 clears the empty sum. v = +inf: m = +inf, and
        // the row is made NaN below.
        s = s * std::exp(static_cast<double>(m) - static_cast<double>(v)) + 1.0;
        m = v;
      } else if (v != v) {
        nan = true;
      } else if (v != -kInf) {
        s += std::exp(v - m);  // -inf <= v <= m
      }  // v = -inf adds exp(-inf) = 0 (skipped: with m still -inf it would be inf - inf)
    }
    // m = -inf: every x was -inf. m = +inf or a NaN seen: NaN row.
    if (nan || !std::isfinite(m) || std::isnan(s)) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    // Pass 2 (one write).
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = static_cast<float>(static_cast<double>(std::exp(xr[c] - m)) / s);
  }
}

}  // namespace minigpt::cpu
