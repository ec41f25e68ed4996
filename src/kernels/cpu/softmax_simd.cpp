// softmax_simd: the run-time ISA dispatch, the threading over rows, the two-pass row driver
// (rows longer than the scratch, and every row of the scalar fallback) and the scalar
// primitives (the same polynomial exp, one lane). The vector ISAs' pipeline steps are in
// softmax_avx2.cpp and softmax_avx512.cpp, the row loop they share in softmax_simd_ops.h.
#include "core/error.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/softmax_simd_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

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

}  // namespace

void softmax_rows_recompute(const SimdOps& ops, const float* x, float* y, int64_t rows,
                            int64_t cols, bool stream) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    OnlineRow row;
    for (int64_t c0 = 0; c0 < cols; c0 += kSimdChunk) {
      const int64_t n = std::min(kSimdChunk, cols - c0);
      row.s += ops.sum_exp(xr + c0, n, row.begin_chunk(ops.max(xr + c0, n)));
    }
    // Pass 2 re-reads the row (from L2 up to ~500k floats) and writes it once.
    if (row.nan_row()) std::fill(yr, yr + cols, std::numeric_limits<float>::quiet_NaN());
    else ops.write(xr, yr, cols, row.m, static_cast<float>(1.0 / row.s), stream);
  }
  if (stream) ops.fence();
}

// The scalar fallback takes the two-pass path at every length: it is the plain statement of the
// vector code's arithmetic, not a fast path.
void softmax_rows_scalar(const float* x, float* y, int64_t rows, int64_t cols, bool stream, bool /*prefetch*/) {
  softmax_rows_recompute({max_scalar, sum_exp_scalar, write_scalar, fence_none}, x, y, rows, cols, stream);
}

void exp_poly_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_scalar(x[i]);
}

}  // namespace detail

void softmax_simd_with(Isa isa, SimdMode stream_mode, SimdMode prefetch_mode, const float* x,
                       float* y, int64_t rows, int64_t cols, ThreadPool& pool) {
  MINIGPT_CHECK(rows >= 0, "softmax: rows must be >= 0, got {}", rows);
  MINIGPT_CHECK(cols >= 1, "softmax: cols must be >= 1, got {}", cols);
  MINIGPT_CHECK(rows == 0 || (x != nullptr && y != nullptr), "softmax: null pointer with {} rows",
                rows);
  MINIGPT_CHECK(cpu_supports(isa), "softmax: this CPU does not support {}", isa_name(isa));
  if (rows == 0) return;
  auto* kernel = isa == Isa::Avx512 ? detail::softmax_rows_avx512
                 : isa == Isa::Avx2 ? detail::softmax_rows_avx2
                                    : detail::softmax_rows_scalar;
  // At least 8k floats (32 KiB) per thread: 13 rows of 600, ~2.6 us at ~0.2 us a row, while a
  // worker that is still polling (ThreadPool::kSpinMicros after its last job) starts in ~1 us;
  // one that has gone to sleep takes 5-50 us to wake, which back-to-back calls do not meet.
  // (64, 600) runs on 2 threads at -t 2 and on 5 from -t 5 up. With 16k floats (3 threads from
  // -t 3 up) it took 7.55 and 6.83 us at -t 8 on the GPU host, against 5.50 and 5.68 with 8k
  // (and 7.44 against 6.19 at -t 16); torch.softmax takes 11-13 us there.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / cols);
  // Auto: stream only outputs far beyond the caches (a small y is usually read again soon);
  // prefetch at every size (softmax.h has the measurements behind both).
  const bool stream = stream_mode == SimdMode::Auto
                          ? rows * cols * static_cast<int64_t>(sizeof(float)) >= kStreamBytes
                          : stream_mode == SimdMode::On;
  const bool prefetch = prefetch_mode != SimdMode::Off;
  pool.parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        kernel(x + begin * cols, y + begin * cols, end - begin, cols, stream, prefetch);
      },
      grain);
}

void softmax_simd(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool& pool) {
  softmax_simd_with(active_isa(), SimdMode::Auto, SimdMode::Auto, x, y, rows, cols, pool);
}

void exp_poly(Isa isa, const float* x, float* y, int64_t n) {
  MINIGPT_CHECK(cpu_supports(isa), "exp_poly: this CPU does not support {}", isa_name(isa));
  if (isa == Isa::Avx512) detail::exp_poly_avx512(x, y, n);
  else if (isa == Isa::Avx2) detail::exp_poly_avx2(x, y, n);
  else detail::exp_poly_scalar(x, y, n);
}

}  // namespace minigpt::cpu
