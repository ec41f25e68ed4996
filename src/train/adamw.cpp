#include "train/adamw.h"

#include "core/error.h"
#include "core/isa.h"
#include "kernels/cpu/vec_math_avx512.h"

// GCC 12's avx512fintrin.h builds unmasked ops on a self-initialised __Y, which
// -Wmaybe-uninitialized reports where they are inlined here (a GCC bug, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cmath>

namespace minigpt {
namespace {

// The per-element constants of one AdamW step.
struct AdamWStep {
  float step_size, inv_sqrt_bc2, decay, b1, b2, one_b1, one_b2, eps;
};

// adamw_update's loop 16 lanes at a time, with the scalar loop's operations in its order (no
// fused multiply-adds; sqrt and division are correctly rounded in both), so the same bits.
__attribute__((target("avx512f"))) void adamw_avx512(float* p, const float* g, float* m,
                                                     float* v, int64_t n, const AdamWStep& s) {
  const __m512 b1 = _mm512_set1_ps(s.b1), b2 = _mm512_set1_ps(s.b2);
  const __m512 one_b1 = _mm512_set1_ps(s.one_b1), one_b2 = _mm512_set1_ps(s.one_b2);
  const __m512 inv_sqrt_bc2 = _mm512_set1_ps(s.inv_sqrt_bc2), eps = _mm512_set1_ps(s.eps);
  const __m512 decay = _mm512_set1_ps(s.decay), step_size = _mm512_set1_ps(s.step_size);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = cpu::avx512::lanes(n - i);
    const __m512 gi = _mm512_maskz_loadu_ps(k, g + i);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, m + i)),
                                    _mm512_mul_ps(one_b1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(one_b2, gi), gi));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), inv_sqrt_bc2), eps);
    const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), decay),
                                    _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom));
    _mm512_mask_storeu_ps(p + i, k, pi);
  }
}

// sum of x^2 over n floats in double, 16 lanes (two 8-lane sums), reduced in a fixed order.
__attribute__((target("avx512f"))) double sum_squares_avx512(const float* x, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(cpu::avx512::lanes(n - i), x + i);
    const __m512d a = cpu::avx512::widen_lo(v), b = cpu::avx512::widen_hi(v);
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

}  // namespace

void AdamWConfig::validate() const {
  MINIGPT_CHECK(beta1 >= 0.0f && beta1 < 1.0f, "AdamW beta1 must be in [0, 1), got {}", beta1);
  MINIGPT_CHECK(beta2 >= 0.0f && beta2 < 1.0f, "AdamW beta2 must be in [0, 1), got {}", beta2);
  MINIGPT_CHECK(eps > 0.0f, "AdamW eps must be positive, got {}", eps);
  MINIGPT_CHECK(weight_decay >= 0.0f && std::isfinite(weight_decay),
                "weight decay must be >= 0, got {}", weight_decay);
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float wd,
                  const AdamWConfig& c, int64_t t) {
  // Bias corrections in double, rounded once, as torch computes them on the host.
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(t));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * wd;
  const float b1 = c.beta1, b2 = c.beta2, one_b1 = 1.0f - c.beta1, one_b2 = 1.0f - c.beta2;
  if (active_isa() == Isa::Avx512)
    return adamw_avx512(p, g, m, v, n, {step_size, inv_sqrt_bc2, decay, b1, b2, one_b1, one_b2, c.eps});
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + one_b1 * gi;
    const float vi = b2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + c.eps;
    p[i] = p[i] * decay - step_size * mi / denom;
  }
}

AdamW::AdamW(const ModelConfig& model, AdamWConfig config)
    : model_(model), config_(config), m_(ModelWeights::zeros_like(model)),
      v_(ModelWeights::zeros_like(model)) {
  config_.validate();
}

bool AdamW::decays(const Tensor& parameter) { return decays(parameter.shape()); }

void AdamW::step(ModelWeights& params, const ModelWeights& grads, float lr, ThreadPool& pool) {
  MINIGPT_CHECK(std::isfinite(lr) && lr >= 0.0f, "AdamW: learning rate must be >= 0, got {}", lr);
  ++steps_;
  auto p = params.named();
  const auto g = grads.named();
  auto m = m_.named();
  auto v = v_.named();
  MINIGPT_CHECK(p.size() == g.size() && p.size() == m.size(),
                "AdamW: {} parameters but {} gradients and {} moments", p.size(), g.size(), m.size());
  for (size_t i = 0; i < p.size(); ++i) {
    Tensor& pt = *p[i].second;
    const Tensor& gt = *g[i].second;
    MINIGPT_CHECK(pt.shape() == gt.shape() && pt.shape() == m[i].second->shape(),
                  "AdamW: '{}' is {} but its gradient is {}", p[i].first, shape_str(pt.shape()),
                  shape_str(gt.shape()));
    const float wd = decays(pt) ? config_.weight_decay : 0.0f;
    float* pd = pt.data();
    const float* gd = gt.data();
    float* md = m[i].second->data();
    float* vd = v[i].second->data();
    const int64_t t = steps_;
    // Elementwise: any split gives the same bits. Chunks of >= 16k floats amortise the wake-up.
    pool.parallel_for(pt.numel(), [&](int64_t b, int64_t e) {
      adamw_update(pd + b, gd + b, md + b, vd + b, e - b, lr, wd, config_, t);
    }, 16384);
  }
}

void AdamW::restore(int64_t steps, ModelWeights m, ModelWeights v) {
  MINIGPT_CHECK(steps >= 0, "AdamW: restored step count must be >= 0, got {}", steps);
  check_weights(m, model_);
  check_weights(v, model_);
  steps_ = steps;
  m_ = std::move(m);
  v_ = std::move(v);
}

double global_grad_norm(const ModelWeights& grads) {
  double sum = 0.0;
  for (const auto& [name, t] : grads.named()) {
    if (active_isa() == Isa::Avx512) {
      sum += sum_squares_avx512(t->data(), t->numel());
    } else {
      for (const float x : t->span()) sum += static_cast<double>(x) * x;
    }
  }
  return std::sqrt(sum);
}

double clip_grad_norm(ModelWeights& grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  MINIGPT_CHECK(std::isfinite(norm), "gradient norm is {}: training diverged", norm);
  if (max_norm > 0.0 && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (auto& [name, t] : grads.named())
      for (float& x : t->span()) x *= scale;
  }
  return norm;
}

}  // namespace minigpt
