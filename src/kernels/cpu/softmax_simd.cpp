// softmax_simd: the run-time ISA dispatch, the threading over rows, the chunked online row
// driver shared by every ISA, and the scalar fallback (the same polynomial exp, one lane).
// The vector primitives are in softmax_avx2.cpp and softmax_avx512.cpp.
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/softmax_simd_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace minigpt::cpu {

namespace detail {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float exp_scalar(float x) {
  if (x != x) return x;
  if (x < kExpPolyLo) return 0.0f;  // and -inf
  // The vector code's rounding (x > 0 is outside the domain: clamped so the cast below is defined).
  const float n = std::min(std::fma(x, kLog2e, kRoundShift) - kRoundShift, 128.0f);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float u = std::fma(kExpC6, r, kExpC5);
  u = std::fma(u, r, kExpC4);
  u = std::fma(u, r, kExpC3);
  u = std::fma(u, r, kExpC2);
  u = std::fma(u, r, 1.0f);
  u = std::fma(u, r, 1.0f);
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return u * std::bit_cast<float>(bits);
}

float max_scalar(const float* x, int64_t n) {
  float m = -kInf;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float sum_exp_scalar(const float* x, int64_t n, float m) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += exp_scalar(x[i] - m);
  return s;
}

void write_scalar(const float* x, float* y, int64_t n, float m, float scale, bool /*stream*/) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_scalar(x[i] - m) * scale;
}

void fence_none() {}

float exp_store_sum_max_scalar(const float* x, float* e, int64_t n, float m, const float* xn,
                               int64_t nn, float* next_max, bool /*prefetch*/) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += (e[i] = exp_scalar(x[i] - m));
  *next_max = max_scalar(xn, nn);
  return s;
}

void scale_scalar(const float* e, float* y, int64_t n, float factor, bool /*stream*/) {
  for (int64_t i = 0; i < n; ++i) y[i] = e[i] * factor;
}

}  // namespace

void softmax_rows(const SimdOps& ops, const float* x, float* y, int64_t rows, int64_t cols,
                  bool stream, bool prefetch) {
  // Rows that fit keep exp(x - m_chunk) in `e` (L1/L2) and pass 2 only scales it: one exp per
  // element. Longer rows recompute the exp in pass 2 (x re-read, e not kept).
  const bool keep = cols <= kScratchFloats;
  const int64_t chunks = (cols + kSimdChunk - 1) / kSimdChunk;
  // A Tensor's CPU storage starts on a 64-byte line: e's vector stores and loads never split one.
  Tensor e_buf = keep ? Tensor::empty({cols}) : Tensor();
  float* const e = keep ? e_buf.data() : nullptr;
  std::vector<float> chunk_m(keep ? static_cast<size_t>(chunks) : 0);  // the m each chunk's e used
  // Chunk k of a row starts at k * kSimdChunk; the chunk after the last one of a row is the
  // first of the next row (rows are contiguous), and the last chunk of the last row has none.
  auto chunk_len = [&](int64_t k) { return std::min(kSimdChunk, cols - k * kSimdChunk); };
  float mc = rows > 0 ? ops.max(x, chunk_len(0)) : 0.0f;  // max of the chunk about to be done
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    // Pass 1, chunk by chunk: m is the max so far, s the sum of exp(x - m) so far, rescaled by
    // exp(m_old - m_new) when m grows. The max of chunk k + 1 is taken while chunk k's exps
    // are computed (its loads from memory then overlap arithmetic on L1 data).
    float m = -kInf;
    double s = 0.0;
    bool nan = false;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t c0 = k * kSimdChunk, n = chunk_len(k);
      const bool last_of_row = k + 1 == chunks;
      const float* xn = last_of_row ? xr + cols : xr + c0 + n;
      const int64_t nn = last_of_row ? (row + 1 < rows ? chunk_len(0) : 0) : chunk_len(k + 1);
      const float m_new = mc > m ? mc : m;  // a NaN mc is dropped here but caught below
      if (m_new == -kInf) {
        // Every value so far is -inf or NaN: nothing to add (and exp(-inf - -inf) would be a
        // NaN that must not leak into a row that later turns finite). Look for a NaN instead.
        for (int64_t i = 0; i < n; ++i) nan |= xr[c0 + i] != xr[c0 + i];
        if (keep) {
          std::fill(e + c0, e + c0 + n, 0.0f);  // exp(-inf) = 0
          chunk_m[k] = -kInf;
        }
        mc = nn > 0 ? ops.max(xn, nn) : 0.0f;
        continue;
      }
      if (m != -kInf && m_new != m) s *= std::exp(static_cast<double>(m) - static_cast<double>(m_new));
      m = m_new;
      // A NaN anywhere in the chunk makes its exp NaN and so s NaN, whatever m is; m = +inf
      // gives exp(inf - inf) = NaN too.
      if (keep) {
        s += ops.exp_store_sum_max(xr + c0, e + c0, n, m, xn, nn, &mc, prefetch);
        chunk_m[k] = m;
      } else {
        s += ops.sum_exp(xr + c0, n, m);
        mc = nn > 0 ? ops.max(xn, nn) : 0.0f;
      }
    }
    if (nan || !std::isfinite(m) || std::isnan(s)) {
      // The design.md rows: NaN or +inf in the row, or every value -inf.
      std::fill(yr, yr + cols, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (!keep) {
      // Pass 2: re-reads the row (from L2 up to ~500k floats) and writes it once.
      ops.write(xr, yr, cols, m, static_cast<float>(1.0 / s), stream);
      continue;
    }
    // Pass 2 from scratch: y = e * exp(m_chunk - m) / s (a chunk of -inf has e = 0).
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t c0 = k * kSimdChunk, n = chunk_len(k);
      const double rescale = chunk_m[k] == m ? 1.0 : std::exp(static_cast<double>(chunk_m[k]) - m);
      ops.scale(e + c0, yr + c0, n, static_cast<float>(rescale / s), stream);
    }
  }
  if (stream) ops.fence();
}

void softmax_rows_scalar(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool prefetch) {
  const SimdOps ops{max_scalar, sum_exp_scalar,       write_scalar,
                    fence_none, exp_store_sum_max_scalar, scale_scalar};
  softmax_rows(ops, x, y, rows, cols, stream, prefetch);
}

void exp_poly_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_scalar(x[i]);
}

}  // namespace detail

bool simd_isa_supported(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::Scalar: return true;
    case SimdIsa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SimdIsa::Avx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

SimdIsa best_simd_isa() {
  if (simd_isa_supported(SimdIsa::Avx512)) return SimdIsa::Avx512;
  if (simd_isa_supported(SimdIsa::Avx2)) return SimdIsa::Avx2;
  return SimdIsa::Scalar;
}

const char* simd_isa_name(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::Scalar: return "scalar";
    case SimdIsa::Avx2: return "avx2";
    case SimdIsa::Avx512: return "avx512";
  }
  return "unknown";
}

std::string softmax_simd_isa() { return simd_isa_name(best_simd_isa()); }

void softmax_simd_with(SimdIsa isa, bool stream, const float* x, float* y, int64_t rows,
                       int64_t cols, ThreadPool& pool) {
  MINIGPT_CHECK(rows >= 0, "softmax: rows must be >= 0, got {}", rows);
  MINIGPT_CHECK(cols >= 1, "softmax: cols must be >= 1, got {}", cols);
  MINIGPT_CHECK(rows == 0 || (x != nullptr && y != nullptr), "softmax: null pointer with {} rows",
                rows);
  MINIGPT_CHECK(simd_isa_supported(isa), "softmax: this CPU does not support {}",
                simd_isa_name(isa));
  if (rows == 0) return;
  auto* kernel = isa == SimdIsa::Avx512 ? detail::softmax_rows_avx512
                 : isa == SimdIsa::Avx2 ? detail::softmax_rows_avx2
                                        : detail::softmax_rows_scalar;
  // At least 16k floats (64 KiB) per thread: (64, 600) is split over 2 threads, as
  // torch.softmax splits it (its grain is 32k elements). A V = 600 row takes ~0.2 us, and a
  // worker that is still polling (ThreadPool::kSpinMicros after its last job) starts in ~1 us;
  // one that has gone to sleep takes 5-50 us to wake, which back-to-back calls do not meet.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / cols);
  pool.parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        const bool prefetch = (end - begin) * cols * static_cast<int64_t>(sizeof(float)) >= kPrefetchMinBytes;
        kernel(x + begin * cols, y + begin * cols, end - begin, cols, stream, prefetch);
      },
      grain);
}

void softmax_simd(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool& pool) {
  // Stream only outputs far beyond the caches: a small y is usually read again soon.
  const bool stream = rows * cols * static_cast<int64_t>(sizeof(float)) >= kStreamBytes;
  softmax_simd_with(best_simd_isa(), stream, x, y, rows, cols, pool);
}

void exp_poly(SimdIsa isa, const float* x, float* y, int64_t n) {
  MINIGPT_CHECK(simd_isa_supported(isa), "exp_poly: this CPU does not support {}",
                simd_isa_name(isa));
  if (isa == SimdIsa::Avx512) detail::exp_poly_avx512(x, y, n);
  else if (isa == SimdIsa::Avx2) detail::exp_poly_avx2(x, y, n);
  else detail::exp_poly_scalar(x, y, n);
}

}  // namespace minigpt::cpu
