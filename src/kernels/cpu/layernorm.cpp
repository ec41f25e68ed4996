// LayerNorm forward and backward on the CPU (layernorm.h).
//
// Row statistics are computed in double, two passes (mean, then the mean of squared
// deviations): for a constant row the double sum of C copies of x is exact, so the mean equals x
// exactly, every deviation is exactly 0 and the output is exactly the bias (design.md). Rows are
// split over the pool; dweight/dbias are split by column, each column summed over all rows in
// order, so every result is the same for any thread count.
#include "kernels/cpu/layernorm.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace minigpt::cpu {
namespace {

// Rows (or columns) per chunk so a chunk holds at least ~2^15 elements: smaller loops stay on the
// calling thread, where waking a worker would cost more than the work.
int64_t grain_for(int64_t per_item) {
  constexpr int64_t kMinParallelElems = int64_t{1} << 15;
  return std::max<int64_t>(1, kMinParallelElems / std::max<int64_t>(1, per_item));
}

}  // namespace

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t C, float eps,
                       ThreadPool& pool) {
  MINIGPT_CHECK(N >= 0 && C >= 1, "layernorm: bad sizes N={} C={}", N, C);
  MINIGPT_CHECK(eps >= 0.0f, "layernorm: eps must be >= 0, got {}", eps);
  pool.parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * C;
          float* yr = y + r * C;
          double sum = 0.0;
          for (int64_t c = 0; c < C; ++c) sum += xr[c];
          const double m = sum / static_cast<double>(C);
          double ss = 0.0;
          for (int64_t c = 0; c < C; ++c) {
            const double d = xr[c] - m;
            ss += d * d;
          }
          const double var = ss / static_cast<double>(C);  // biased, as nn.LayerNorm
          const double rs = 1.0 / std::sqrt(var + static_cast<double>(eps));
          const float mf = static_cast<float>(m), rf = static_cast<float>(rs);
          // (x - mean) in float: exact 0 for a constant row, since mf == x there.
          for (int64_t c = 0; c < C; ++c) {
            const float xhat = (xr[c] - mf) * rf;
            yr[c] = xhat * weight[c] + bias[c];
          }
          if (mean) mean[r] = mf;
          if (rstd) rstd[r] = rf;
        }
      },
      grain_for(C));
}

void layernorm_backward(const float* dy, const float* x, const float* weight, const float* mean,
                        const float* rstd, float* dx, float* dweight, float* dbias, int64_t N,
                        int64_t C, ThreadPool& pool) {
  MINIGPT_CHECK(N >= 0 && C >= 1, "layernorm_backward: bad sizes N={} C={}", N, C);
  MINIGPT_CHECK(mean && rstd, "layernorm_backward needs the forward's mean and rstd");
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight.
  pool.parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * C;
          const float* dyr = dy + r * C;
          float* dxr = dx + r * C;
          const float m = mean[r], rs = rstd[r];
          double sum_g = 0.0, sum_gx = 0.0;
          for (int64_t c = 0; c < C; ++c) {
            const float xhat = (xr[c] - m) * rs;
            const float g = dyr[c] * weight[c];
            sum_g += g;
            sum_gx += static_cast<double>(g) * xhat;
          }
          const float mg = static_cast<float>(sum_g / static_cast<double>(C));
          const float mgx = static_cast<float>(sum_gx / static_cast<double>(C));
          for (int64_t c = 0; c < C; ++c) {
            const float xhat = (xr[c] - m) * rs;
            const float g = dyr[c] * weight[c];
            dxr[c] = rs * (g - mg - xhat * mgx);
          }
        }
      },
      grain_for(C));
  if (!dweight && !dbias) return;
  // dweight += sum_n dy * xhat, dbias += sum_n dy: columns split, rows summed in order.
  pool.parallel_for(
      C,
      [&](int64_t c0, int64_t c1) {
        const size_t w = static_cast<size_t>(c1 - c0);
        std::vector<double> dw(w, 0.0), db(w, 0.0);
        for (int64_t r = 0; r < N; ++r) {
          const float* xr = x + r * C + c0;
          const float* dyr = dy + r * C + c0;
          const float m = mean[r], rs = rstd[r];
          for (size_t c = 0; c < w; ++c) {
            const float xhat = (xr[c] - m) * rs;
            dw[c] += static_cast<double>(dyr[c]) * xhat;
            db[c] += dyr[c];
          }
        }
        for (size_t c = 0; c < w; ++c) {
          if (dweight) dweight[c0 + static_cast<int64_t>(c)] += static_cast<float>(dw[c]);
          if (dbias) dbias[c0 + static_cast<int64_t>(c)] += static_cast<float>(db[c]);
        }
      },
      grain_for(N));
}

}  // namespace minigpt::cpu
