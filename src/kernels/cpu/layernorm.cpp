// LayerNorm forward and backward on the CPU (layernorm.h).
//
// Row statistics are computed in double, two passes (mean, then the mean of squared
// deviations): for a constant row the double sum of C copies of x is exact, so the mean equals x
// exactly, every deviation is exactly 0 and the output is exactly the bias (docs/ARCHITECTURE.md). Rows are
// split over the pool; dweight/dbias are split by column, each column summed over all rows in
// order, so every result is the same for any thread count. With AVX-512 the row sums run in
// 8 double lanes (each lane summed in order, lanes reduced in a fixed order: still exact for a
// constant row) and the elementwise loops are compiled for AVX-512; scalar code otherwise.
#include "kernels/cpu/layernorm.h"

#include "core/error.h"
#include "core/isa.h"

#include <immintrin.h>

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


// The row statistics and the elementwise loops of one row, for AVX-512 (kAvx512) or plain.
// Float lanes [c, c + 8) widened to double; lanes past n read as 0.
__attribute__((target("avx512f"), always_inline)) inline __m512d load8_pd(const float* x,
                                                                         int64_t n) {
  const __mmask16 m = n >= 8 ? __mmask16{0xFF} : static_cast<__mmask16>((1u << n) - 1);
  return _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(m, x)));
}

__attribute__((target("avx512f"))) void forward_row_avx512(const float* xr, const float* weight,
                                                           const float* bias, float* yr,
                                                           int64_t C, float eps, float* mean_out,
                                                           float* rstd_out) {
  __m512d acc = _mm512_setzero_pd();
  for (int64_t c = 0; c < C; c += 8) acc = _mm512_add_pd(acc, load8_pd(xr + c, C - c));
  const double m = _mm512_reduce_add_pd(acc) / static_cast<double>(C);
  const __m512d mv = _mm512_set1_pd(m);
  acc = _mm512_setzero_pd();
  for (int64_t c = 0; c < C; c += 8) {
    const int64_t n = std::min<int64_t>(8, C - c);
    const __m512d d = _mm512_maskz_sub_pd(static_cast<__mmask8>((1u << n) - 1), load8_pd(xr + c, n), mv);
    acc = _mm512_fmadd_pd(d, d, acc);
  }
  const double var = _mm512_reduce_add_pd(acc) / static_cast<double>(C);
  const float mf = static_cast<float>(m);
  const float rf = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
  for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mf) * rf * weight[c] + bias[c];
  *mean_out = mf;
  *rstd_out = rf;
}

__attribute__((target("avx512f"))) void backward_row_avx512(const float* dyr, const float* xr,
                                                            const float* weight, float m,
                                                            float rs, float* dxr, int64_t C) {
  __m512d acc_g = _mm512_setzero_pd(), acc_gx = _mm512_setzero_pd();
  const __m512 mv = _mm512_set1_ps(m), rsv = _mm512_set1_ps(rs);
  for (int64_t c = 0; c < C; c += 8) {
    const int64_t n = std::min<int64_t>(8, C - c);
    const __mmask16 k = static_cast<__mmask16>((1u << n) - 1);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + c), mv), rsv);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dyr + c), _mm512_maskz_loadu_ps(k, weight + c));
    const __m512d gd = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
    acc_g = _mm512_add_pd(acc_g, gd);
    acc_gx = _mm512_fmadd_pd(gd, _mm512_cvtps_pd(_mm512_castps512_ps256(xhat)), acc_gx);
  }
  const float mg = static_cast<float>(_mm512_reduce_add_pd(acc_g) / static_cast<double>(C));
  const float mgx = static_cast<float>(_mm512_reduce_add_pd(acc_gx) / static_cast<double>(C));
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = (xr[c] - m) * rs;
    dxr[c] = rs * (dyr[c] * weight[c] - mg - xhat * mgx);
  }
}

__attribute__((target("avx512f"))) void param_grads_avx512(const float* dy, const float* x,
                                                           const float* mean, const float* rstd,
                                                           int64_t N, int64_t C, int64_t c0,
                                                           int64_t w, double* dw, double* db) {
  for (int64_t r = 0; r < N; ++r) {
    const float* xr = x + r * C + c0;
    const float* dyr = dy + r * C + c0;
    const float m = mean[r], rs = rstd[r];
    for (int64_t c = 0; c < w; ++c) {  // independent columns: vectorised, order over r kept
      const float xhat = (xr[c] - m) * rs;
      dw[c] += static_cast<double>(dyr[c]) * xhat;
      db[c] += dyr[c];
    }
  }
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
        if (active_isa() == Isa::Avx512) {
          for (int64_t r = r0; r < r1; ++r) {
            float mf, rf;
            forward_row_avx512(x + r * C, weight, bias, y + r * C, C, eps, &mf, &rf);
            if (mean) mean[r] = mf;
            if (rstd) rstd[r] = rf;
          }
          return;
        }
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
        if (active_isa() == Isa::Avx512) {
          for (int64_t r = r0; r < r1; ++r)
            backward_row_avx512(dy + r * C, x + r * C, weight, mean[r], rstd[r], dx + r * C, C);
          return;
        }
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
        if (active_isa() == Isa::Avx512) {
          param_grads_avx512(dy, x, mean, rstd, N, C, c0, static_cast<int64_t>(w), dw.data(),
                             db.data());
        } else {
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
        }
        for (size_t c = 0; c < w; ++c) {
          if (dweight) dweight[c0 + static_cast<int64_t>(c)] += static_cast<float>(dw[c]);
          if (dbias) dbias[c0 + static_cast<int64_t>(c)] += static_cast<float>(db[c]);
        }
      },
      grain_for(N));
}

}  // namespace minigpt::cpu
