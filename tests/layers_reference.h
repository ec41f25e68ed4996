// Plain double-precision references of the CPU layers (linear, layernorm, GELU, attention,
// cross-entropy), for layers_test.cpp and gradcheck_test.cpp. Never optimised: straight loops
// over std::vector<double>, written from the nn.* definitions, not from the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace minigpt::testref {

using Vec = std::vector<double>;

// Test inputs: n floats uniform in [lo, hi) from a seed, and their double copy.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// y (N, out) = x (N, in) W^T (out, in) + b (out, empty = none)
inline Vec linear(const Vec& x, const Vec& W, const Vec& b, int64_t N, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[n * in + i] * W[o * in + i];
      y[n * out + o] = acc;
    }
  return y;
}

// nn.LayerNorm over rows of C: biased variance, eps inside the sqrt.
inline Vec layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, double eps) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    for (int64_t c = 0; c < C; ++c)
      y[n * C + c] = (x[n * C + c] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return y;
}

// erfc form: 1 + erf(x / sqrt 2) cancels for x << 0 even in double.
inline double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

// Causal attention core: qkv (B, T, 3C) -> out (B, T, C), scale 1/sqrt(dh). att (B, NH, T, T)
// is filled with the probabilities if non-null (0 above the diagonal).
inline Vec attention(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                     Vec* att = nullptr) {
  const int64_t dh = C / NH;
  Vec out(static_cast<size_t>(B * T * C), 0.0);
  if (att) att->assign(static_cast<size_t>(B * NH * T * T), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t1 = 0; t1 < T; ++t1) {
        auto q = [&](int64_t d) { return qkv[(b * T + t1) * 3 * C + h * dh + d]; };
        auto k = [&](int64_t t, int64_t d) { return qkv[(b * T + t) * 3 * C + C + h * dh + d]; };
        auto v = [&](int64_t t, int64_t d) { return qkv[(b * T + t) * 3 * C + 2 * C + h * dh + d]; };
        Vec s(static_cast<size_t>(t1 + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          double acc = 0;
          for (int64_t d = 0; d < dh; ++d) acc += q(d) * k(t2, d);
          s[t2] = acc / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, s[t2]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          const double p = s[t2] / sum;
          if (att) (*att)[((b * NH + h) * T + t1) * T + t2] = p;
          for (int64_t d = 0; d < dh; ++d) out[(b * T + t1) * C + h * dh + d] += p * v(t2, d);
        }
      }
  return out;
}

// Mean over non-ignored rows (target -1 ignored) of logsumexp(row) - row[target]; 0 if none.
inline double cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                            int64_t V) {
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == -1) continue;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - mx);
    total += mx + std::log(s) - logits[n * V + targets[n]];
    ++count;
  }
  return count ? total / count : 0.0;
}

}  // namespace minigpt::testref
