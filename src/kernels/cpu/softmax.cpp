// The plain softmax versions: softmax_reference (double), softmax_naive (three float passes)
// and softmax_fused (online max and sum). The vectorised version is in softmax_simd.cpp and
// the per-ISA files; this file holds no intrinsics.
//
// How the special values fall out (docs/ARCHITECTURE.md): with m the row max,
//   - a NaN makes exp(NaN - m) NaN, so the sum and every output are NaN;
//   - a +inf makes m = +inf and exp(inf - inf) = NaN, same outcome;
//   - an all -inf row has m = -inf and exp(-inf - -inf) = NaN: a NaN row (as torch.softmax);
//   - [1e30, 0, -1e30]: exp(0) = 1 exactly, exp(-1e30) = 0, sum 1, so [1, 0, 0] exactly.
// The fused version cannot rely on that arithmetic alone (its running max starts after any
// leading -inf, and its rescaling skips the inf - inf), so it checks the row's max and sum
// explicitly before its scale pass.
//
// Why fused stores its exps (as naive does) rather than computing them again in a second
// pass: at V = 600 a row is in L1 after its first read, so the cost of both kernels is the
// scalar std::exp, not memory; computing each exp twice made fused 1.7x slower than naive in
// `minigpt demo` (17.3 vs 10.0 ms at (4096, 600)). Now it computes one exp per element against
// the running max, remembers where the max changed (a few segments per row), and its second
// pass multiplies each segment by exp(m_segment - m) / sum: one exp per element, no max pass.
#include "kernels/cpu/softmax.h"

#include "core/error.h"

#include <cmath>
#include <limits>
#include <vector>

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
  // One segment per change of the running max: y[start..] holds exp(x - m) for that m. A random
  // row raises its max about ln(cols) times (~11 at 50257); a rising row once per element, and
  // the vector grows for it (each element is still scaled once, so its rounding does not pile up).
  struct Segment {
    int64_t start;
    float m;
  };
  std::vector<Segment> seg;
  seg.reserve(64);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // A leading run of -inf adds exp(-inf) = 0 each; skipped so that the running max below
    // starts finite (exp(-inf - -inf) would be NaN). An all -inf row is a NaN row.
    int64_t c0 = 0;
    while (c0 < cols && xr[c0] == -kInf) yr[c0++] = 0.0f;
    if (c0 == cols) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    // Pass 1 (one read of x, one write of y): m = running max, y[c] = exp(x[c] - m) for the
    // m of c's segment, s = sum of exp(x - m) (in double), rescaled when m grows. A NaN makes
    // its exp, and so s, NaN; +inf makes m = +inf; both give a NaN row below.
    float m = xr[c0];
    double s = 1.0;
    yr[c0] = 1.0f;
    seg.assign(1, {c0, m});
    for (int64_t c = c0 + 1; c < cols; ++c) {
      const float v = xr[c];
      if (v > m) {
        s *= std::exp(static_cast<double>(m) - static_cast<double>(v));
        m = v;
        seg.push_back({c, m});
      }
      const float e = std::exp(v - m);  // the same scalar exp as naive, once per element
      yr[c] = e;
      s += e;
    }
    if (!std::isfinite(m) || std::isnan(s)) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    // Pass 2 (y only, in cache for rows that fit): each segment times exp(m_seg - m) / s.
    for (size_t k = 0; k < seg.size(); ++k) {
      const int64_t end = k + 1 < seg.size() ? seg[k + 1].start : cols;
      const double scale = std::exp(static_cast<double>(seg[k].m) - static_cast<double>(m)) / s;
      for (int64_t c = seg[k].start; c < end; ++c) yr[c] = static_cast<float>(yr[c] * scale);
    }
  }
}

}  // namespace minigpt::cpu
