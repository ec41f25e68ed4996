// Every CPU layer's backward against central finite differences of its double-precision
// reference forward (layers_reference.h): the loss is L = sum(R * f(inputs)) for a fixed random
// R, so dL/dy = R is what the float backward receives. Inputs and parameters are both perturbed.
// Differences in double (h = 1e-5) are accurate to ~1e-10, so the comparison measures the float
// kernels, not the differencing: we require max |analytic - numeric| <= 2e-5 * max |numeric|.
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "layers_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace minigpt {
namespace {

using testref::random_floats;
using testref::to_double;
using testref::Vec;
using Floats = std::vector<float>;

constexpr double kRelTol = 2e-5;


double weighted_sum(const Vec& y, const Floats& R) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * R[i];
  return s;
}

// d loss / d x[i] for every i, by central differences of the double function `loss`.
Vec numeric_grad(const std::function<double(const Vec&)>& loss, Vec x) {
  constexpr double h = 1e-5;
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss(x);
    x[i] = saved - h;
    const double down = loss(x);
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void expect_grad_close(const Floats& analytic, const Vec& numeric, const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double max_ref = 0, max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(numeric[i]));
    const double err = std::fabs(analytic[i] - numeric[i]);
    if (!(err <= max_err)) {  // NaN lands here and is kept as the worst
      max_err = err;
      worst = i;
    }
  }
  ASSERT_GT(max_ref, 0.0) << what << ": the numeric gradient is all zero, the check is vacuous";
  EXPECT_LE(max_err, kRelTol * max_ref)
      << what << ": element " << worst << " analytic " << analytic[worst] << " numeric "
      << numeric[worst] << " (max |numeric| " << max_ref << ")";
}

TEST(GradCheck, Linear) {
  ThreadPool pool(2);
  struct Case {
    int64_t N, in, out;
  };
  for (const auto& c : {Case{5, 7, 3}, Case{3, 16, 11}, Case{1, 4, 1}, Case{70, 9, 5}}) {
    const Floats x = random_floats(c.N * c.in, 1), W = random_floats(c.out * c.in, 2);
    const Floats b = random_floats(c.out, 3), R = random_floats(c.N * c.out, 4);
    Floats dx(x.size(), NAN), dW(W.size(), 0.0f), db(b.size(), 0.0f);
    cpu::linear_backward(x.data(), W.data(), R.data(), dx.data(), dW.data(), db.data(), c.N, c.in,
                         c.out, pool);
    const Vec xd = to_double(x), Wd = to_double(W), bd = to_double(b);
    auto f = [&](const Vec& xx, const Vec& WW, const Vec& bb) {
      return weighted_sum(testref::linear(xx, WW, bb, c.N, c.in, c.out), R);
    };
    expect_grad_close(dx, numeric_grad([&](const Vec& v) { return f(v, Wd, bd); }, xd), "linear dx");
    expect_grad_close(dW, numeric_grad([&](const Vec& v) { return f(xd, v, bd); }, Wd), "linear dW");
    expect_grad_close(db, numeric_grad([&](const Vec& v) { return f(xd, Wd, v); }, bd), "linear db");
  }
}

TEST(GradCheck, LayerNorm) {
  ThreadPool pool(2);
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{4, 7}, {2, 64}, {3, 3}}) {
    const Floats x = random_floats(N * C, 10, -2.0f, 3.0f);
    const Floats w = random_floats(C, 11, 0.5f, 1.5f), b = random_floats(C, 12);
    const Floats R = random_floats(N * C, 13);
    const float eps = 1e-5f;
    Floats y(x.size()), mean(N), rstd(N), dx(x.size(), NAN), dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C,
                           eps, pool);
    cpu::layernorm_backward(R.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                            dw.data(), db.data(), N, C, pool);
    const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b);
    auto f = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
      return weighted_sum(testref::layernorm(xx, ww, bb, N, C, eps), R);
    };
    expect_grad_close(dx, numeric_grad([&](const Vec& v) { return f(v, wd, bd); }, xd), "layernorm dx");
    expect_grad_close(dw, numeric_grad([&](const Vec& v) { return f(xd, v, bd); }, wd), "layernorm dweight");
    expect_grad_close(db, numeric_grad([&](const Vec& v) { return f(xd, wd, v); }, bd), "layernorm dbias");
  }
}

TEST(GradCheck, Gelu) {
  ThreadPool pool(2);
  Floats x = random_floats(301, 20, -6.0f, 6.0f);
  for (const float v : {0.0f, 1e-3f, -1e-3f, 0.7071f, -0.7071f, 3.0f, -3.0f, 8.0f, -8.0f})
    x.push_back(v);
  const Floats R = random_floats(x.size(), 21);
  Floats dx(x.size(), NAN);
  cpu::gelu_backward(x.data(), R.data(), dx.data(), static_cast<int64_t>(x.size()), pool);
  auto f = [&](const Vec& xx) {
    Vec y(xx.size());
    for (size_t i = 0; i < xx.size(); ++i) y[i] = testref::gelu(xx[i]);
    return weighted_sum(y, R);
  };
  expect_grad_close(dx, numeric_grad(f, to_double(x)), "gelu dx");
}

TEST(GradCheck, Attention) {
  ThreadPool pool(2);
  struct Case {
    int64_t B, T, C, NH;
  };
  // head size 16 with T = 16 and T = 11: the 16 x 16 tile path (attention.cpp); the rest: rows
  for (const auto& c : {Case{2, 5, 12, 3}, Case{1, 1, 8, 2}, Case{1, 7, 6, 1}, Case{1, 16, 32, 2},
                        Case{1, 11, 32, 2}}) {
    const Floats qkv = random_floats(c.B * c.T * 3 * c.C, 30, -1.5f, 1.5f);
    const Floats R = random_floats(c.B * c.T * c.C, 31);
    Floats out(c.B * c.T * c.C), att(c.B * c.NH * c.T * c.T), dqkv(qkv.size(), NAN);
    cpu::attention_forward(qkv.data(), out.data(), att.data(), c.B, c.T, c.C, c.NH, pool);
    cpu::attention_backward(R.data(), qkv.data(), att.data(), dqkv.data(), c.B, c.T, c.C, c.NH,
                            pool);
    auto f = [&](const Vec& v) { return weighted_sum(testref::attention(v, c.B, c.T, c.C, c.NH), R); };
    expect_grad_close(dqkv, numeric_grad(f, to_double(qkv)), "attention dqkv");
  }
}

TEST(GradCheck, CrossEntropy) {
  ThreadPool pool(2);
  for (const auto& [N, V] : {std::pair<int64_t, int64_t>{6, 7}, {3, 600}, {1, 1}}) {
    const Floats logits = random_floats(N * V, 40, -4.0f, 4.0f);
    std::vector<int32_t> targets(N);
    for (int64_t n = 0; n < N; ++n) targets[n] = n % 3 == 1 ? -1 : static_cast<int32_t>((5 * n) % V);
    Floats d(logits.size(), NAN);
    cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d.data(), N, V, pool);
    auto f = [&](const Vec& v) { return testref::cross_entropy(v, targets, N, V); };
    if (V == 1) {  // a one-word vocabulary: loss is identically 0, and so is the gradient
      for (float g : d) EXPECT_EQ(g, 0.0f);
      continue;
    }
    expect_grad_close(d, numeric_grad(f, to_double(logits)), "cross-entropy dlogits");
  }
}

}  // namespace
}  // namespace minigpt
