// Fused softmax cross-entropy on the CPU (cross_entropy.h).
//
// Per row: max m, s = sum exp(x - m) (exp <= 1 after the max is subtracted, so no overflow;
// summed in double), loss = m + log(s) - x[target]. The gradient row is exp(x - m) / (s * count)
// with 1/count subtracted at the target. Rows are split over the pool; each row's loss goes to
// its own slot and the slots are summed in row order, so the mean is the same for any thread
// count.
//
// With AVX-512 the exps run 8 at a time in double (vec_math_avx512.h; x - m is exact in double)
// and are summed in 8 lane sums reduced in a fixed order; without it, expf one at a time.
#include "kernels/cpu/cross_entropy.h"

#include "core/error.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace minigpt::cpu {
namespace {

// e[v] = exp(x[v] - m) as float (e may be null), returns sum_v exp(x[v] - m) in double.
__attribute__((target("avx512f"))) double exp_sum_avx512(const float* x, float m, float* e,
                                                         int64_t V) {
  const __m512d md = _mm512_set1_pd(m);
  __m512d acc = _mm512_setzero_pd();
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m512d ev = avx512::exp_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + v)), md));
    if (e) _mm256_storeu_ps(e + v, _mm512_cvtpd_ps(ev));
    acc = _mm512_add_pd(acc, ev);
  }
  double s = _mm512_reduce_add_pd(acc);
  for (; v < V; ++v) {  // tail in the same double arithmetic, one lane at a time
    float xb[8] = {x[v]}, eb[8];
    const __m512d ev = avx512::exp_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(xb)), md));
    _mm256_storeu_ps(eb, _mm512_cvtpd_ps(ev));
    s += _mm512_mask_reduce_add_pd(1, ev);
    if (e) e[v] = eb[0];
  }
  return s;
}

double exp_sum(const float* x, float m, float* e, int64_t V) {
  if (gemm_avx512_available()) return exp_sum_avx512(x, m, e, V);
  double s = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    const float ev = std::exp(x[v] - m);
    if (e) e[v] = ev;
    s += ev;
  }
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
          float m = x[0];
          for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
          const double s = exp_sum(x, m, dx, V);
          if (dx) {
            const float scale = static_cast<float>(inv_count / s);
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
