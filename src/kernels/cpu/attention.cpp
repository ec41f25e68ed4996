// Causal multi-head attention core on the CPU (attention.h): forward, backward, decode step.
//
// One query row attends to keys 0..t1 only; the masked keys are never computed (no -inf or
// -1e4 fill), and their att entries are written as 0. The softmax is the usual max-subtracted
// one, local to this file, in float.
//
// Two implementations:
// - the model's shape (head size 16, T <= 16) with AVX-512: a whole (batch, head) pair as
//   16 x 16 register tiles, forward and backward (attend_pair_dh16, backward_pair_dh16), exp
//   by vec_math_avx512.h exp_ps;
// - any other shape: one query row at a time, dot products and row updates over dh (AVX-512
//   16 lanes, masked tails, or scalar), exact expf.
// Work is split over (batch, head) pairs (or (batch, head, query) rows), each written by
// exactly one thread and summed in a fixed order, so every result is the same for any thread
// count.
#include "kernels/cpu/attention.h"

#include "core/error.h"
#include "core/isa.h"
#include "kernels/cpu/gemm_avx512.h"  // transpose_avx512
#include "kernels/cpu/vec_math_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace minigpt::cpu {
namespace {

void check_sizes(const char* what, int64_t B, int64_t T, int64_t C, int64_t NH) {
  MINIGPT_CHECK(B >= 0 && T >= 1 && C >= 1 && NH >= 1, "{}: bad sizes B={} T={} C={} NH={}",
                what, B, T, C, NH);
  MINIGPT_CHECK(C % NH == 0, "{}: C={} is not divisible by NH={}", what, C, NH);
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query against keys/values rows 0..len-1 (row stride `stride` floats): p (len) gets the
// softmax probabilities, out (dh) the weighted sum of values.
inline void attend_row(const float* q, const float* k, const float* v, int64_t stride,
                       int64_t len, int64_t dh, float scale, float* p, float* out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = dot(q, k + j * stride, dh) * scale;
    mx = std::max(mx, p[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = std::exp(p[j] - mx);  // max subtracted: every exp <= 1, no overflow
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
  std::fill(out, out + dh, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float* vj = v + j * stride;
    for (int64_t d = 0; d < dh; ++d) out[d] += p[j] * vj[d];
  }
}

// AVX-512 versions of dot(a, b, n) and y += alpha * x over n floats.
__attribute__((target("avx512f"))) inline float dot_avx512(const float* a, const float* b,
                                                          int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 m = avx512::lanes(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f"))) inline void axpy_avx512(float alpha, const float* x, float* y,
                                                           int64_t n) {
  const __m512 av = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = avx512::lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// attend_row with the AVX-512 dot and axpy (same algorithm and order over keys).
__attribute__((target("avx512f"))) void attend_row_avx512(const float* q, const float* k,
                                                          const float* v, int64_t stride,
                                                          int64_t len, int64_t dh, float scale,
                                                          float* p, float* out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = dot_avx512(q, k + j * stride, dh) * scale;
    mx = std::max(mx, p[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
  std::fill(out, out + dh, 0.0f);
  for (int64_t j = 0; j < len; ++j) axpy_avx512(p[j], v + j * stride, out, dh);
}

void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t len,
            int64_t dh, float scale, float* p, float* out) {
  if (active_isa() == Isa::Avx512) return attend_row_avx512(q, k, v, stride, len, dh, scale, p, out);
  attend_row(q, k, v, stride, len, dh, scale, p, out);
}

// The model's shape (dh = 16, T <= 16), one (b, h) pair, as 16 x 16 tiles held "transposed":
// a register per key t2 whose lanes are the queries t1. Then the softmax over keys is a
// vertical max and sum across registers (no horizontal reductions, no per-row latency chain):
//   Q^T (16 d x 16 t1) by a register transpose;
//   S^T[t2] = scale * sum_d k[t2][d] Q^T[d]            16 FMAs per key, lanes t1 >= t2 live;
//   P^T[t2] = exp(S^T[t2] - max) / sum                 float exp (vec_math_avx512.h exp_ps);
//   out[t1] = sum_{t2 <= t1} P[t1][t2] v[t2]           one vector (d) per key, in key order.
// pt gets P^T (pt[t2 * 16 + t1]); masked entries (t2 > t1) are exactly 0.
__attribute__((target("avx512f"))) void attend_pair_dh16(const float* base, int64_t C3,
                                                         int64_t T, float scale, float* pt,
                                                         float* out, int64_t out_stride,
                                                         int64_t C) {
  alignas(64) float qt[16 * 16] = {};  // lanes t1 >= T stay 0 (never stored)
  transpose_avx512(T, 16, base, C3, qt, 16);  // qt[d * 16 + t1] = q[t1][d]
  const float* k = base + C;
  const float* v = base + 2 * C;
  const __mmask16 rows = static_cast<__mmask16>((1u << T) - 1u);
  __m512 s[16];
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t t2 = 0; t2 < T; ++t2) {
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < 16; ++d)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(k[t2 * C3 + d]), _mm512_load_ps(qt + d * 16), acc);
    s[t2] = _mm512_mul_ps(acc, _mm512_set1_ps(scale));
    const __mmask16 live = rows & static_cast<__mmask16>(0xFFFFu << t2);  // queries t1 >= t2
    mx = _mm512_mask_max_ps(mx, live, mx, s[t2]);
  }
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t2 = 0; t2 < T; ++t2) {
    const __mmask16 live = rows & static_cast<__mmask16>(0xFFFFu << t2);
    s[t2] = _mm512_maskz_mov_ps(live, avx512::exp_ps(_mm512_sub_ps(s[t2], mx)));
    sum = _mm512_add_ps(sum, s[t2]);
  }
  // lanes t1 >= T have sum 0: their 1/0 is never stored
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), sum);
  for (int64_t t2 = 0; t2 < T; ++t2) _mm512_store_ps(pt + t2 * 16, _mm512_mul_ps(s[t2], inv));
  for (int64_t t1 = 0; t1 < T; ++t1) {
    __m512 o = _mm512_setzero_ps();
    for (int64_t t2 = 0; t2 <= t1; ++t2)
      o = _mm512_fmadd_ps(_mm512_set1_ps(pt[t2 * 16 + t1]), _mm512_loadu_ps(v + t2 * C3), o);
    _mm512_storeu_ps(out + t1 * out_stride, o);
  }
}

// The backward of attend_pair_dh16 for one (b, h), in the same transposed tiles. With g[t1]
// the output gradient rows and P the saved probabilities:
//   dP^T[t2] = sum_d v[t2][d] G^T[d];  rowsum = sum_t2 P^T[t2] dP^T[t2]  (lanes t1)
//   dS^T[t2] = P^T[t2] (dP^T[t2] - rowsum) scale                        (0 where masked)
//   dv[t2] = sum_{t1 >= t2} P[t1][t2] g[t1];  dk[t2] = sum_{t1 >= t2} dS[t1][t2] q[t1];
//   dq[t1] = sum_{t2 <= t1} dS[t1][t2] k[t2]                             (vectors over d)
// Every dq, dk, dv row of this pair is written exactly once (no zero fill, no +=).
__attribute__((target("avx512f"))) void backward_pair_dh16(const float* g, int64_t g_stride,
                                                           const float* base, const float* att,
                                                           float* dbase, int64_t C3, int64_t T,
                                                           float scale, int64_t C) {
  alignas(64) float gt[16 * 16] = {}, pt[16 * 16] = {}, dst[16 * 16];
  transpose_avx512(T, 16, g, g_stride, gt, 16);  // gt[d * 16 + t1] = g[t1][d]
  transpose_avx512(T, T, att, T, pt, 16);        // pt[t2 * 16 + t1] = P[t1][t2]
  const float* q = base;
  const float* k = base + C;
  const float* v = base + 2 * C;
  __m512 dp[16];
  __m512 rowsum = _mm512_setzero_ps();
  for (int64_t t2 = 0; t2 < T; ++t2) {
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < 16; ++d)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(v[t2 * C3 + d]), _mm512_load_ps(gt + d * 16), acc);
    dp[t2] = acc;
    rowsum = _mm512_fmadd_ps(_mm512_load_ps(pt + t2 * 16), acc, rowsum);
  }
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int64_t t2 = 0; t2 < T; ++t2)
    _mm512_store_ps(dst + t2 * 16, _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(pt + t2 * 16),
                                                               _mm512_sub_ps(dp[t2], rowsum)),
                                                 scale_v));
  for (int64_t t2 = 0; t2 < T; ++t2) {
    __m512 dv = _mm512_setzero_ps(), dk = _mm512_setzero_ps();
    for (int64_t t1 = t2; t1 < T; ++t1) {
      dv = _mm512_fmadd_ps(_mm512_set1_ps(pt[t2 * 16 + t1]), _mm512_loadu_ps(g + t1 * g_stride), dv);
      dk = _mm512_fmadd_ps(_mm512_set1_ps(dst[t2 * 16 + t1]), _mm512_loadu_ps(q + t1 * C3), dk);
    }
    _mm512_storeu_ps(dbase + t2 * C3 + 2 * C, dv);
    _mm512_storeu_ps(dbase + t2 * C3 + C, dk);
  }
  for (int64_t t1 = 0; t1 < T; ++t1) {
    __m512 dq = _mm512_setzero_ps();
    for (int64_t t2 = 0; t2 <= t1; ++t2)
      dq = _mm512_fmadd_ps(_mm512_set1_ps(dst[t2 * 16 + t1]), _mm512_loadu_ps(k + t2 * C3), dq);
    _mm512_storeu_ps(dbase + t1 * C3, dq);
  }
}

}  // namespace

void attention_forward(const float* qkv, float* out, float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, ThreadPool& pool) {
  check_sizes("attention_forward", B, T, C, NH);
  const int64_t dh = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (dh == 16 && T <= 16 && active_isa() == Isa::Avx512) {
    pool.parallel_for(
        B * NH,
        [&](int64_t p0, int64_t p1) {
          alignas(64) float pt[16 * 16];
          for (int64_t pair = p0; pair < p1; ++pair) {
            const int64_t b = pair / NH, h = pair % NH;
            attend_pair_dh16(qkv + b * T * C3 + h * dh, C3, T, scale, pt,
                             out + b * T * C + h * dh, C, C);
            // att[t1][t2] = pt[t2 * 16 + t1]: the backward's row-major probabilities
            if (att) transpose_avx512(T, T, pt, 16, att + pair * T * T, T);
          }
        },
        std::max<int64_t>(1, (int64_t{1} << 17) / (T * T * dh * 2)));
    return;
  }
  const int64_t rows = B * NH * T;  // row = (b, h, t1)
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / (T * dh * 2));
  pool.parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        std::vector<float> scratch(static_cast<size_t>(T));
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t t1 = r % T, h = (r / T) % NH, b = r / (T * NH);
          const float* base = qkv + b * T * C3;
          const float* q = base + t1 * C3 + h * dh;
          const float* k = base + C + h * dh;
          const float* v = base + 2 * C + h * dh;
          float* p = att ? att + r * T : scratch.data();
          attend(q, k, v, C3, t1 + 1, dh, scale, p, out + (b * T + t1) * C + h * dh);
          if (att) std::fill(p + t1 + 1, p + T, 0.0f);  // masked: never computed
        }
      },
      grain);
}

namespace {

// dp = g . v_t2; dv_t2 += p g; ds = p (dp - sum(p dp)) scale; dq_t1 = sum ds k_t2;
// dk_t2 += ds q_t1. This (b, h) owns columns [h dh, (h+1) dh) of q, k and v in every row of
// batch b, so pairs never write the same element.
#define MINIGPT_BACKWARD_PAIR_BODY(DOT, AXPY)                                              \
  const int64_t dh = C / NH, C3 = 3 * C, pair = b * NH + h;                                \
  const float* base = qkv + b * T * C3;                                                    \
  float* dbase = dqkv + b * T * C3;                                                        \
  for (int64_t t = 0; t < T; ++t) {                                                        \
    std::fill(dbase + t * C3 + C + h * dh, dbase + t * C3 + C + (h + 1) * dh, 0.0f);       \
    std::fill(dbase + t * C3 + 2 * C + h * dh, dbase + t * C3 + 2 * C + (h + 1) * dh, 0.0f); \
  }                                                                                        \
  for (int64_t t1 = 0; t1 < T; ++t1) {                                                     \
    const float* p = att + (pair * T + t1) * T;                                            \
    const float* g = dout + (b * T + t1) * C + h * dh;                                     \
    const float* q = base + t1 * C3 + h * dh;                                              \
    float sum_pdp = 0.0f;                                                                  \
    for (int64_t t2 = 0; t2 <= t1; ++t2) {                                                 \
      const float dp = DOT(g, base + t2 * C3 + 2 * C + h * dh, dh);                        \
      AXPY(p[t2], g, dbase + t2 * C3 + 2 * C + h * dh, dh);                                \
      ds[t2] = dp;                                                                         \
      sum_pdp += p[t2] * dp;                                                               \
    }                                                                                      \
    float* dq = dbase + t1 * C3 + h * dh;                                                  \
    std::fill(dq, dq + dh, 0.0f);                                                          \
    for (int64_t t2 = 0; t2 <= t1; ++t2) {                                                 \
      const float dsc = p[t2] * (ds[t2] - sum_pdp) * scale;                                \
      AXPY(dsc, base + t2 * C3 + C + h * dh, dq, dh);                                      \
      AXPY(dsc, q, dbase + t2 * C3 + C + h * dh, dh);                                      \
    }                                                                                      \
  }

inline void axpy_scalar(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

__attribute__((target("avx512f"))) void backward_pair_avx512(
    const float* dout, const float* qkv, const float* att, float* dqkv, int64_t b, int64_t h,
    int64_t T, int64_t C, int64_t NH, float scale, float* ds) {
  MINIGPT_BACKWARD_PAIR_BODY(dot_avx512, axpy_avx512)
}

void backward_pair_scalar(const float* dout, const float* qkv, const float* att, float* dqkv,
                          int64_t b, int64_t h, int64_t T, int64_t C, int64_t NH, float scale,
                          float* ds) {
  MINIGPT_BACKWARD_PAIR_BODY(dot, axpy_scalar)
}
#undef MINIGPT_BACKWARD_PAIR_BODY

}  // namespace

void attention_backward(const float* dout, const float* qkv, const float* att, float* dqkv,
                        int64_t B, int64_t T, int64_t C, int64_t NH, ThreadPool& pool) {
  check_sizes("attention_backward", B, T, C, NH);
  MINIGPT_CHECK(att != nullptr, "attention_backward needs the forward's att probabilities");
  const int64_t dh = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / (T * T * dh * 2));
  const bool avx512 = active_isa() == Isa::Avx512;
  if (dh == 16 && T <= 16 && avx512) {
    const int64_t C3 = 3 * C;
    pool.parallel_for(
        B * NH,
        [&](int64_t p0, int64_t p1) {
          for (int64_t pair = p0; pair < p1; ++pair) {
            const int64_t b = pair / NH, h = pair % NH;
            backward_pair_dh16(dout + b * T * C + h * dh, C, qkv + b * T * C3 + h * dh,
                               att + pair * T * T, dqkv + b * T * C3 + h * dh, C3, T, scale, C);
          }
        },
        grain);
    return;
  }
  pool.parallel_for(
      B * NH,
      [&](int64_t p0, int64_t p1) {
        std::vector<float> ds(static_cast<size_t>(T));
        for (int64_t pair = p0; pair < p1; ++pair) {
          if (avx512)
            backward_pair_avx512(dout, qkv, att, dqkv, pair / NH, pair % NH, T, C, NH, scale, ds.data());
          else
            backward_pair_scalar(dout, qkv, att, dqkv, pair / NH, pair % NH, T, C, NH, scale, ds.data());
        }
      },
      grain);
}

void attention_decode_step(const float* q, const float* k_cache, const float* v_cache,
                           float* out, int64_t t, int64_t C, int64_t NH) {
  MINIGPT_CHECK(t >= 0 && C >= 1 && NH >= 1 && C % NH == 0,
                "attention_decode_step: bad sizes t={} C={} NH={}", t, C, NH);
  const int64_t dh = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<float> p(static_cast<size_t>(t + 1));
  for (int64_t h = 0; h < NH; ++h)
    attend(q + h * dh, k_cache + h * dh, v_cache + h * dh, C, t + 1, dh, scale, p.data(),
           out + h * dh);
}

}  // namespace minigpt::cpu
