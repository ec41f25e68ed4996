// Fused softmax cross-entropy on the CPU (cross_entropy.h).
//
// Per row: max m, s = sum exp(x - m) (exp <= 1 after the max is subtracted, so no overflow;
// summed in double), loss = m + log(s) - x[target]. The gradient row is exp(x - m) / (s * count)
// with 1/count subtracted at the target. Rows are split over the pool; each row's loss goes to
// its own slot and the slots are summed in row order, so the mean is the same for any thread
// count.
#include "kernels/cpu/cross_entropy.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace minigpt::cpu {

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
          double s = 0.0;
          if (dx) {
            for (int64_t v = 0; v < V; ++v) {
              dx[v] = std::exp(x[v] - m);
              s += dx[v];
            }
            const float scale = static_cast<float>(inv_count / s);
            for (int64_t v = 0; v < V; ++v) dx[v] *= scale;
            dx[t] -= static_cast<float>(inv_count);
          } else {
            for (int64_t v = 0; v < V; ++v) s += std::exp(x[v] - m);
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
