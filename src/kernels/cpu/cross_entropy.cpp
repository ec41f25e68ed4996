// Fused softmax cross-entropy on the CPU (cross_entropy.h).
//
// Per row: max m, s = sum exp(x - m) (exp <= 1 after the max is subtracted, so no overflow;
// summed in double), loss = m + log(s) - x[target]. The gradient row is exp(x - m) / (s * count)
// with 1/count subtracted at the target. Rows are split over the pool; each row's loss goes to
// its own slot and the slots are summed in row order, so the mean is the same for any thread
// count.
//
// With AVX-512 the exps run 16 at a time in float (vec_math_avx512.h exp_ps, about 1 ulp) and
// are summed in double, in 8 lane sums reduced in a fixed order; without it, expf one at a
// time. (An earlier version evaluated the exps in double: twice the time, for no difference
// the loss or the gradient tests could see.)
#include "kernels/cpu/cross_entropy.h"

#include "core/error.h"
#include "core/isa.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace minigpt::cpu {
namespace {

// One row of cross_entropy_forward_backward: returns sum_v exp(x[v] - m) (summed in double),
// with m the row max in *m_out; dx (may be null) gets exp(x - m) * scale_num / sum, then
// -scale_num at the target. 16 lanes, the exps in float (vec_math_avx512.h exp_ps, ~1 ulp:
// the arguments are <= 0 after the max is subtracted), widened to double for the sum (8-lane
// sums reduced in a fixed order), masked tails.
__attribute__((target("avx512f"))) double row_avx512(const float* x, int64_t V, float* dx,
                                                     float* m_out) {
  const auto mask = [V](int64_t v) { return avx512::lanes(V - v); };
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t v = 0; v < V; v += 16) mx = _mm512_mask_max_ps(mx, mask(v), mx, _mm512_loadu_ps(x + v));
  const float m = _mm512_reduce_max_ps(mx);
  const __m512 mv = _mm512_set1_ps(m);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t v = 0; v < V; v += 16) {
    const __mmask16 k = mask(v);
    const __m512 e = _mm512_maskz_mov_ps(k, avx512::exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + v), mv)));
    if (dx) _mm512_mask_storeu_ps(dx + v, k, e);
    lo = _mm512_add_pd(lo, avx512::widen_lo(e));
    hi = _mm512_add_pd(hi, avx512::widen_hi(e));
  }
  *m_out = m;
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

// dx[0, V) *= scale (AVX-512).
__attribute__((target("avx512f"))) void scale_avx512(float* dx, int64_t V, float scale) {
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t v = 0; v < V; v += 16) {
    const __mmask16 k = avx512::lanes(V - v);
    _mm512_mask_storeu_ps(dx + v, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dx + v), sv));
  }
}

// The same row without AVX-512: expf one at a time, summed in double.
double row_scalar(const float* x, int64_t V, float* dx, float* m_out) {
  float m = x[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
  double s = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    const float ev = std::exp(x[v] - m);
    if (dx) dx[v] = ev;
    s += ev;
  }
  *m_out = m;
  return s;
}

}  // namespace

float cross_entropy_forward_backward(const float* logits, const int32_t* targets, float* dlogits,
                                     int64_t N, int64_t V, ThreadPool& pool) {
  MINIGPT_CHECK(N >= 0 && V >= 1, "cross_entropy: bad sizes N={} V={}", N, V);
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    MINIGPT_CHECK(targets[n] == -1 || (targets[n] >= 0 && targets[n] < V),
                  "cross_entropy: target {} at row {} is outside [0, {}) and is not the ignore "
                  "index -1",
                  targets[n], n, V);
    count += targets[n] != -1;
  }
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / V);
  const bool avx512 = active_isa() == Isa::Avx512;
  pool.parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t n = r0; n < r1; ++n) {
          const float* x = logits + n * V;
          float* dx = dlogits ? dlogits + n * V : nullptr;
          const int32_t t = targets[n];
          if (t == -1) {  // ignored position: no loss, zero gradient row
            if (dx) std::fill(dx, dx + V, 0.0f);
            continue;
          }
          float m;
          const double s = avx512 ? row_avx512(x, V, dx, &m) : row_scalar(x, V, dx, &m);
          if (dx) {  // softmax / count, minus 1 / count at the target
            const float scale = static_cast<float>(inv_count / s);
            if (avx512)
              scale_avx512(dx, V, scale);
            else
              for (int64_t v = 0; v < V; ++v) dx[v] *= scale;
            dx[t] -= static_cast<float>(inv_count);
          }
          row_loss[static_cast<size_t>(n)] =
              static_cast<double>(m) + std::log(s) - static_cast<double>(x[t]);
        }
      },
      grain);
  if (count == 0) return 0.0f;
  double total = 0.0;
  for (const double l : row_loss) total += l;
  return static_cast<float>(total * inv_count);
}

}  // namespace minigpt::cpu
