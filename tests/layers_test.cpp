// Forward (and closed-form backward) of the CPU layers against the double references in
// layers_reference.h, the docs/ARCHITECTURE.md numerics cases, and bitwise equality between 1 and 2
// threads. Finite-difference checks of the backwards live in gradcheck_test.cpp.
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "layers_reference.h"

#include "core/error.h"
#include "expect_error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace minigpt {
namespace {

using testref::random_floats;
using testref::to_double;
using testref::Vec;
using Floats = std::vector<float>;


// Every element within atol + rtol * |ref|; NaN never passes. Reports the worst element.
void expect_close(const Floats& got, const Vec& ref, double atol, double rtol, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const double excess = std::isnan(err) ? INFINITY : err - (atol + rtol * std::fabs(ref[i]));
    if (excess > worst || std::isnan(got[i])) {
      worst = std::isnan(got[i]) ? INFINITY : excess;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << worst_i << " got " << got[worst_i]
                        << " want " << ref[worst_i];
}

// Prints the worst absolute error and the worst relative error where |ref| > 0.01.
void print_worst_errors(const Floats& got, const Vec& ref, const char* what) {
  double worst_abs = 0, worst_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    const double err = std::fabs(got[i] - ref[i]);
    worst_abs = std::max(worst_abs, err);
    if (std::fabs(ref[i]) > 1e-2) worst_rel = std::max(worst_rel, err / std::fabs(ref[i]));
  }
  std::printf("%s: worst |err| %.3g, worst relative %.3g (%.1f float ulp) where |ref| > 0.01\n",
              what, worst_abs, worst_rel, worst_rel * 8388608.0);
}

void expect_bitwise_equal(const Floats& a, const Floats& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// ---------------------------------------------------------------------------------- linear

struct LinearCase {
  int64_t N, in, out;
};
const LinearCase kLinearCases[] = {{1, 64, 192}, {1, 64, 600}, {7, 13, 9},   {32, 64, 600},
                                   {32, 256, 64}, {33, 17, 5}, {300, 64, 256}, {5, 1, 1}};

TEST(Linear, ForwardMatchesDoubleReference) {
  ThreadPool pool(2);
  for (const auto& c : kLinearCases) {
    for (const bool bias : {true, false}) {
      const Floats x = random_floats(c.N * c.in, 1), W = random_floats(c.out * c.in, 2);
      const Floats b = bias ? random_floats(c.out, 3) : Floats{};
      Floats y(c.N * c.out, NAN);
      cpu::linear_forward(x.data(), W.data(), bias ? b.data() : nullptr, y.data(), c.N, c.in,
                          c.out, pool);
      const Vec ref = testref::linear(to_double(x), to_double(W), to_double(b), c.N, c.in, c.out);
      expect_close(y, ref, 1e-5, 1e-5, "linear forward");
      Floats y_ref(c.N * c.out, NAN);
      cpu::linear_reference(x.data(), W.data(), bias ? b.data() : nullptr, y_ref.data(), c.N,
                            c.in, c.out);
      expect_close(y_ref, ref, 1e-6, 1e-6, "linear_reference");
    }
  }
}

TEST(Linear, BackwardMatchesClosedForm) {
  ThreadPool pool(2);
  for (const auto& c : kLinearCases) {
    const Floats x = random_floats(c.N * c.in, 4), W = random_floats(c.out * c.in, 5);
    const Floats dy = random_floats(c.N * c.out, 6);
    Floats dx(c.N * c.in, NAN);
    Floats dW = random_floats(c.out * c.in, 7), db = random_floats(c.out, 8);  // accumulated into
    const Floats dW0 = dW, db0 = db;
    cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), db.data(), c.N,
                         c.in, c.out, pool);
    Vec rdx(dx.size(), 0), rdW(dW0.begin(), dW0.end()), rdb(db0.begin(), db0.end());
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t o = 0; o < c.out; ++o) {
        const double g = dy[n * c.out + o];
        rdb[o] += g;
        for (int64_t i = 0; i < c.in; ++i) {
          rdx[n * c.in + i] += g * W[o * c.in + i];
          rdW[o * c.in + i] += g * x[n * c.in + i];
        }
      }
    expect_close(dx, rdx, 1e-5, 1e-5, "linear dx");
    expect_close(dW, rdW, 1e-5, 1e-5, "linear dW");
    expect_close(db, rdb, 1e-5, 1e-5, "linear db");
  }
}

TEST(Linear, OneAndTwoThreadsAgreeBitwise) {
  ThreadPool one(1), two(2);
  for (const auto& c : {LinearCase{1024, 64, 192}, LinearCase{1024, 256, 64}, LinearCase{32, 64, 600},
                        LinearCase{1, 64, 600}, LinearCase{333, 64, 600}}) {
    const Floats x = random_floats(c.N * c.in, 9), W = random_floats(c.out * c.in, 10);
    const Floats b = random_floats(c.out, 11), dy = random_floats(c.N * c.out, 12);
    Floats y[2], dx[2], dW[2], db[2];
    ThreadPool* pools[2] = {&one, &two};
    for (int p = 0; p < 2; ++p) {
      y[p].assign(c.N * c.out, NAN);
      dx[p].assign(c.N * c.in, NAN);
      dW[p].assign(c.out * c.in, 0.5f);
      db[p].assign(c.out, 0.25f);
      cpu::linear_forward(x.data(), W.data(), b.data(), y[p].data(), c.N, c.in, c.out, *pools[p]);
      cpu::linear_backward(x.data(), W.data(), dy.data(), dx[p].data(), dW[p].data(),
                           db[p].data(), c.N, c.in, c.out, *pools[p]);
    }
    expect_bitwise_equal(y[0], y[1], "linear y");
    expect_bitwise_equal(dx[0], dx[1], "linear dx");
    expect_bitwise_equal(dW[0], dW[1], "linear dW");
    expect_bitwise_equal(db[0], db[1], "linear db");
  }
}

// The packed forward is its own code path on every ISA (gemm_avx512 on the packing made once,
// sgemm on W^T, or the scalar row updates over W^T): it gets a NaN-filled W wherever it does
// not read W (linear.h), so a result that matches proves the packing was used, and it is
// checked against the double reference as well as bitwise against linear_forward.
TEST(Linear, PrepackedForwardEqualsForwardBitwise) {
  ThreadPool one(1), two(2);
  for (const auto& c : kLinearCases) {
    const Floats x = random_floats(c.N * c.in, 13), W = random_floats(c.out * c.in, 14);
    const Floats b = random_floats(c.out, 15);
    Floats packed(static_cast<size_t>(cpu::linear_packed_floats(c.in, c.out)), NAN);
    cpu::linear_pack_weights(W.data(), packed.data(), c.in, c.out);
    const Floats W_nan(W.size(), NAN);
    const bool reads_W = cpu::linear_packed_reads_weights(c.N);
    const Vec ref = testref::linear(to_double(x), to_double(W), to_double(b), c.N, c.in, c.out);
    for (ThreadPool* pool : {&one, &two}) {
      SCOPED_TRACE(::testing::Message() << "N=" << c.N << " in=" << c.in << " out=" << c.out
                                        << " threads=" << pool->size());
      Floats y(c.N * c.out, NAN), yp(c.N * c.out, NAN);
      cpu::linear_forward(x.data(), W.data(), b.data(), y.data(), c.N, c.in, c.out, *pool);
      cpu::linear_forward_packed(x.data(), reads_W ? W.data() : W_nan.data(), packed.data(),
                                 b.data(), yp.data(), c.N, c.in, c.out, *pool);
      expect_bitwise_equal(y, yp, "packed forward");
      expect_close(yp, ref, 1e-5, 1e-5, "packed forward against the reference");
    }
  }
}

// The fused epilogues against the unfused sequences: linear_forward, then y + residual, or
// then gelu_forward and gelu_backward with dy = 1 (GELU'); linear_backward's dx_scale against
// dx * scale. Bitwise equal on every path (the 12 x 32 kernel, packed or not, the decode dot
// products at N < 4), for 1 and 2 threads, and with the residual being y itself (in place, as
// the model's residual stream).
TEST(Linear, FusedEpilogueEqualsUnfusedSequenceBitwise) {
  ThreadPool one(1), two(2);
  for (const auto& c : kLinearCases) {
    const Floats x = random_floats(c.N * c.in, 16, -3.0f, 3.0f), W = random_floats(c.out * c.in, 17);
    const Floats b = random_floats(c.out, 18, -2.0f, 2.0f), res = random_floats(c.N * c.out, 19);
    Floats packed(static_cast<size_t>(cpu::linear_packed_floats(c.in, c.out)), NAN);
    cpu::linear_pack_weights(W.data(), packed.data(), c.in, c.out);
    for (ThreadPool* pool : {&one, &two}) {
      SCOPED_TRACE(::testing::Message() << "N=" << c.N << " in=" << c.in << " out=" << c.out
                                        << " threads=" << pool->size());
      Floats pre(c.N * c.out, NAN), sum(c.N * c.out, NAN), gelu(c.N * c.out, NAN);
      Floats gelu_grad(c.N * c.out, NAN);
      cpu::linear_forward(x.data(), W.data(), b.data(), pre.data(), c.N, c.in, c.out, *pool);
      for (size_t i = 0; i < pre.size(); ++i) sum[i] = pre[i] + res[i];
      cpu::gelu_forward(pre.data(), gelu.data(), c.N * c.out, *pool);
      const Floats ones(pre.size(), 1.0f);
      cpu::gelu_backward(pre.data(), ones.data(), gelu_grad.data(), c.N * c.out, *pool);
      for (const bool use_packed : {false, true}) {
        const auto forward = [&](float* y, const cpu::LinearEpilogue& ep) {
          if (use_packed)
            cpu::linear_forward_packed(x.data(), W.data(), packed.data(), b.data(), y, c.N, c.in,
                                       c.out, *pool, ep);
          else
            cpu::linear_forward(x.data(), W.data(), b.data(), y, c.N, c.in, c.out, *pool, ep);
        };
        Floats y(c.N * c.out, NAN), g(c.N * c.out, NAN);
        forward(y.data(), {.gelu = true, .gelu_grad = g.data()});
        expect_bitwise_equal(y, gelu, "fused GELU");
        expect_bitwise_equal(g, gelu_grad, "fused GELU'");
        forward(y.data(), {.gelu = true});
        expect_bitwise_equal(y, gelu, "fused GELU without GELU'");
        forward(y.data(), {.residual = res.data()});
        expect_bitwise_equal(y, sum, "fused residual add");
        Floats inplace = res;  // y = y + x W^T + b, as the residual stream
        forward(inplace.data(), {.residual = inplace.data()});
        expect_bitwise_equal(inplace, sum, "fused residual add in place");
      }
      // backward: dx = (dy @ W) * scale
      const Floats dy = random_floats(c.N * c.out, 20), scale = random_floats(c.N * c.in, 21);
      Floats dx(c.N * c.in, NAN), dx_scaled(c.N * c.in, NAN), dW(c.out * c.in, 0.0f);
      cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), nullptr, c.N,
                           c.in, c.out, *pool);
      cpu::linear_backward(x.data(), W.data(), dy.data(), dx_scaled.data(), dW.data(), nullptr,
                           c.N, c.in, c.out, *pool, scale.data());
      for (size_t i = 0; i < dx.size(); ++i) dx[i] *= scale[i];
      expect_bitwise_equal(dx_scaled, dx, "fused dx scale");
    }
  }
}

TEST(Linear, EmptyBatchAndBadSizes) {
  ThreadPool pool(2);
  const Floats W = random_floats(12, 1);
  Floats dW(12, 1.0f);
  cpu::linear_forward(nullptr, W.data(), nullptr, nullptr, 0, 3, 4, pool);
  cpu::linear_backward(nullptr, W.data(), nullptr, nullptr, dW.data(), nullptr, 0, 3, 4, pool);
  EXPECT_EQ(dW, Floats(12, 1.0f));
  EXPECT_ERROR(cpu::linear_forward(nullptr, W.data(), nullptr, nullptr, 1, 0, 4, pool), "linear: bad sizes N=1 in=0 out=4");
}

// ------------------------------------------------------------------------------- layernorm

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  ThreadPool pool(2);
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1, 64}, {7, 13}, {1024, 64}, {3, 1}}) {
    const Floats x = random_floats(N * C, 20, -3.0f, 5.0f);
    const Floats w = random_floats(C, 21, 0.5f, 1.5f), b = random_floats(C, 22);
    Floats y(N * C, NAN), mean(N, NAN), rstd(N, NAN);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C,
                           1e-5f, pool);
    expect_close(y, testref::layernorm(to_double(x), to_double(w), to_double(b), N, C, 1e-5),
                 1e-5, 1e-5, "layernorm y");
    for (int64_t n = 0; n < N; ++n) {
      double m = 0, v = 0;
      for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
      m /= C;
      for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
      EXPECT_NEAR(mean[n], m, 1e-6 * (1 + std::fabs(m)));
      EXPECT_NEAR(rstd[n], 1 / std::sqrt(v / C + 1e-5), 1e-5 / std::sqrt(v / C + 1e-5));
    }
  }
}

TEST(LayerNorm, ConstantRowGivesExactlyTheBias) {
  ThreadPool pool(1);
  const int64_t C = 64;
  const Floats w = random_floats(C, 23), b = random_floats(C, 24);
  for (const float value : {0.0f, 1.0f, -3.7f, 0.1f, 12345.678f, 1e-30f, 3e30f}) {
    const Floats x(C, value);
    Floats y(C, NAN);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), nullptr, nullptr, 1, C, 1e-5f,
                           pool);
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(y[c], b[c]) << "value " << value << " col " << c;
  }
}

TEST(LayerNorm, OneAndTwoThreadsAgreeBitwise) {
  ThreadPool one(1), two(2);
  const int64_t N = 1024, C = 64;
  const Floats x = random_floats(N * C, 25), w = random_floats(C, 26), b = random_floats(C, 27);
  const Floats dy = random_floats(N * C, 28);
  Floats y[2], dx[2], dw[2], db[2], mean[2], rstd[2];
  ThreadPool* pools[2] = {&one, &two};
  for (int p = 0; p < 2; ++p) {
    y[p].assign(N * C, NAN);
    dx[p].assign(N * C, NAN);
    mean[p].assign(N, NAN);
    rstd[p].assign(N, NAN);
    dw[p].assign(C, 0.0f);
    db[p].assign(C, 0.0f);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y[p].data(), mean[p].data(),
                           rstd[p].data(), N, C, 1e-5f, *pools[p]);
    cpu::layernorm_backward(dy.data(), x.data(), w.data(), mean[p].data(), rstd[p].data(),
                            dx[p].data(), dw[p].data(), db[p].data(), N, C, *pools[p]);
  }
  expect_bitwise_equal(y[0], y[1], "layernorm y");
  expect_bitwise_equal(dx[0], dx[1], "layernorm dx");
  expect_bitwise_equal(dw[0], dw[1], "layernorm dweight");
  expect_bitwise_equal(db[0], db[1], "layernorm dbias");
}

// ------------------------------------------------------------------------------------ GELU

TEST(Gelu, ForwardMatchesDoubleReference) {
  ThreadPool pool(2);
  Floats x = random_floats(100003, 30, -12.0f, 12.0f);  // odd size, crosses the grain
  for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 0.5f, -0.5f, 3.0f, -3.0f, 5.5f,
                        -5.5f, 9.0f, -9.0f, 20.0f, -20.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f})
    x.push_back(v);
  Floats y(x.size(), NAN);
  cpu::gelu_forward(x.data(), y.data(), static_cast<int64_t>(x.size()), pool);
  Vec ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = testref::gelu(x[i]);
  // Float GELU (gelu.h): Phi carries ~1e-7 absolute error, so GELU = x Phi is bounded by
  // ~1.5e-7 |x| absolute plus a few float ulp. Printed: the measured worst cases.
  print_worst_errors(y, ref, "gelu forward");
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) {
      ASSERT_LE(std::fabs(y[i] - ref[i]), 6e-7 * std::fabs(ref[i]) + 2e-7 * std::fabs(x[i]) + 1e-30)
          << "x = " << x[i];
    }
  }
}

TEST(Gelu, InfinitiesNaNAndSignedZero) {
  ThreadPool pool(1);
  const Floats x = {-INFINITY, INFINITY, NAN, -0.0f, -1e30f, -200.0f};
  Floats y(x.size(), 123.0f), dx(x.size(), 123.0f);
  const Floats dy(x.size(), 1.0f);
  cpu::gelu_forward(x.data(), y.data(), 6, pool);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::signbit(y[0])) << "GELU(-inf) must be -0";
  EXPECT_EQ(y[1], INFINITY);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 0.0f);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), 6, pool);
  EXPECT_EQ(dx[0], 0.0f);
  EXPECT_EQ(dx[1], 1.0f);
  EXPECT_TRUE(std::isnan(dx[2]));
  EXPECT_EQ(dx[3], 0.5f);  // GELU'(0) = 1/2
  EXPECT_EQ(dx[4], 0.0f);
  EXPECT_EQ(dx[5], 0.0f);
}

TEST(Gelu, BackwardMatchesClosedForm) {
  ThreadPool pool(2);
  const Floats x = random_floats(70001, 31, -10.0f, 10.0f), dy = random_floats(70001, 32);
  Floats dx(x.size(), NAN);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()), pool);
  Vec ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    ref[i] = dy[i] * (0.5 * std::erfc(-v / std::sqrt(2.0)) +
                      v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
  }
  // Float GELU' (gelu.h): Phi's ~1e-7 absolute error, and near the root of GELU' (x ~ -0.75)
  // Phi + x phi cancels: an absolute floor of 3e-7 |dy| on top of the relative bound.
  print_worst_errors(dx, ref, "gelu backward");
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::fabs(dx[i] - ref[i]), 6e-7 * std::fabs(ref[i]) + 3e-7 * std::fabs(dy[i]))
        << "x = " << x[i] << ", dy = " << dy[i];
}

TEST(Gelu, ForwardWithGradEqualsForwardAndBackwardBitwise) {
  ThreadPool pool(2);
  Floats x = random_floats(40001, 35, -9.0f, 9.0f);
  for (const float v : {-INFINITY, INFINITY, NAN, -0.0f, 0.0f, -1e30f, 1e30f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const Floats ones(x.size(), 1.0f);
  Floats y(x.size(), NAN), grad(x.size(), NAN), y_ref(x.size(), NAN), grad_ref(x.size(), NAN);
  cpu::gelu_forward(x.data(), y_ref.data(), n, pool);
  cpu::gelu_backward(x.data(), ones.data(), grad_ref.data(), n, pool);
  cpu::gelu_forward_with_grad(x.data(), y.data(), grad.data(), n, pool);
  expect_bitwise_equal(y, y_ref, "gelu_forward_with_grad y");
  expect_bitwise_equal(grad, grad_ref, "gelu_forward_with_grad grad");
  Floats inplace = x;  // y = x
  cpu::gelu_forward_with_grad(inplace.data(), inplace.data(), grad.data(), n, pool);
  expect_bitwise_equal(inplace, y_ref, "gelu_forward_with_grad in place");
  expect_bitwise_equal(grad, grad_ref, "gelu_forward_with_grad grad (in place)");
}

TEST(Gelu, OneAndTwoThreadsAgreeBitwise) {
  ThreadPool one(1), two(2);
  const Floats x = random_floats(262147, 33, -6.0f, 6.0f), dy = random_floats(262147, 34);
  Floats y[2], dx[2];
  ThreadPool* pools[2] = {&one, &two};
  for (int p = 0; p < 2; ++p) {
    y[p].assign(x.size(), NAN);
    dx[p].assign(x.size(), NAN);
    cpu::gelu_forward(x.data(), y[p].data(), static_cast<int64_t>(x.size()), *pools[p]);
    cpu::gelu_backward(x.data(), dy.data(), dx[p].data(), static_cast<int64_t>(x.size()),
                       *pools[p]);
  }
  expect_bitwise_equal(y[0], y[1], "gelu y");
  expect_bitwise_equal(dx[0], dx[1], "gelu dx");
}

// ------------------------------------------------------------------------------- attention

struct AttnCase {
  int64_t B, T, C, NH;
};
const AttnCase kAttnCases[] = {{2, 16, 64, 4}, {1, 1, 64, 4}, {2, 11, 64, 4}, {3, 5, 12, 3}, {2, 7, 10, 1},
                               {64, 16, 64, 4}};

TEST(Attention, ForwardMatchesDoubleReference) {
  ThreadPool pool(2);
  for (const auto& c : kAttnCases) {
    const Floats qkv = random_floats(c.B * c.T * 3 * c.C, 40, -2.0f, 2.0f);
    Floats out(c.B * c.T * c.C, NAN), att(c.B * c.NH * c.T * c.T, NAN);
    cpu::attention_forward(qkv.data(), out.data(), att.data(), c.B, c.T, c.C, c.NH, pool);
    Vec ref_att;
    const Vec ref = testref::attention(to_double(qkv), c.B, c.T, c.C, c.NH, &ref_att);
    expect_close(out, ref, 1e-5, 1e-5, "attention out");
    expect_close(att, ref_att, 1e-6, 1e-5, "attention att");
    for (int64_t r = 0; r < c.B * c.NH * c.T; ++r)  // masked entries written as exactly 0
      for (int64_t t2 = r % c.T + 1; t2 < c.T; ++t2) ASSERT_EQ(att[r * c.T + t2], 0.0f);
    Floats out2(out.size(), NAN);  // att may be null at inference
    cpu::attention_forward(qkv.data(), out2.data(), nullptr, c.B, c.T, c.C, c.NH, pool);
    expect_bitwise_equal(out, out2, "attention without att");
  }
}

TEST(Attention, DecodeStepEqualsFullForward) {
  ThreadPool pool(1);
  const int64_t T = 9, C = 64, NH = 4;
  const Floats qkv = random_floats(T * 3 * C, 41, -2.0f, 2.0f);
  Floats out(T * C, NAN);
  cpu::attention_forward(qkv.data(), out.data(), nullptr, 1, T, C, NH, pool);
  Floats k_cache(T * C), v_cache(T * C);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(&k_cache[t * C], &qkv[t * 3 * C + C], C * sizeof(float));
    std::memcpy(&v_cache[t * C], &qkv[t * 3 * C + 2 * C], C * sizeof(float));
    Floats step(C, NAN);
    cpu::attention_decode_step(&qkv[t * 3 * C], k_cache.data(), v_cache.data(), step.data(), t,
                               C, NH);
    for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(step[i], out[t * C + i], 1e-6) << t << " " << i;
  }
}

TEST(Attention, OneAndTwoThreadsAgreeBitwise) {
  ThreadPool one(1), two(2);
  const AttnCase c{64, 16, 64, 4};
  const Floats qkv = random_floats(c.B * c.T * 3 * c.C, 42), dout = random_floats(c.B * c.T * c.C, 43);
  Floats out[2], att[2], dqkv[2];
  ThreadPool* pools[2] = {&one, &two};
  for (int p = 0; p < 2; ++p) {
    out[p].assign(c.B * c.T * c.C, NAN);
    att[p].assign(c.B * c.NH * c.T * c.T, NAN);
    dqkv[p].assign(qkv.size(), NAN);
    cpu::attention_forward(qkv.data(), out[p].data(), att[p].data(), c.B, c.T, c.C, c.NH, *pools[p]);
    cpu::attention_backward(dout.data(), qkv.data(), att[p].data(), dqkv[p].data(), c.B, c.T, c.C,
                            c.NH, *pools[p]);
  }
  expect_bitwise_equal(out[0], out[1], "attention out");
  expect_bitwise_equal(att[0], att[1], "attention att");
  expect_bitwise_equal(dqkv[0], dqkv[1], "attention dqkv");
}

// --------------------------------------------------------------------------- cross-entropy

TEST(CrossEntropy, LossAndGradientMatchDoubleReference) {
  ThreadPool pool(2);
  for (const auto& [N, V] : {std::pair<int64_t, int64_t>{1, 600}, {7, 13}, {1024, 601}, {5, 1}}) {
    const Floats logits = random_floats(N * V, 50, -8.0f, 8.0f);
    std::vector<int32_t> targets(N);
    for (int64_t n = 0; n < N; ++n) targets[n] = n % 4 == 3 ? -1 : static_cast<int32_t>((n * 37) % V);
    Floats dlogits(N * V, NAN);
    const float loss = cpu::cross_entropy_forward_backward(logits.data(), targets.data(),
                                                           dlogits.data(), N, V, pool);
    const double ref = testref::cross_entropy(to_double(logits), targets, N, V);
    EXPECT_NEAR(loss, ref, 1e-6 * (1 + std::fabs(ref)));
    EXPECT_EQ(loss, cpu::cross_entropy_forward_backward(logits.data(), targets.data(), nullptr, N,
                                                        V, pool));
    int64_t count = 0;
    for (auto t : targets) count += t != -1;
    Vec rd(N * V, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      if (targets[n] == -1) continue;
      double mx = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, logits[n * V + v]);
      for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - mx);
      for (int64_t v = 0; v < V; ++v)
        rd[n * V + v] = (std::exp(logits[n * V + v] - mx) / s - (v == targets[n])) / count;
    }
    expect_close(dlogits, rd, 1e-8, 1e-5, "cross-entropy dlogits");
  }
}

TEST(CrossEntropy, AllIgnoredAndBadTargets) {
  ThreadPool pool(1);
  const Floats logits = random_floats(3 * 5, 51);
  const std::vector<int32_t> ignored = {-1, -1, -1};
  Floats d(15, NAN);
  EXPECT_EQ(cpu::cross_entropy_forward_backward(logits.data(), ignored.data(), d.data(), 3, 5, pool),
            0.0f);
  EXPECT_EQ(d, Floats(15, 0.0f));
  EXPECT_EQ(cpu::cross_entropy_forward_backward(nullptr, nullptr, nullptr, 0, 5, pool), 0.0f);
  const std::vector<int32_t> bad = {0, 5, 1}, negative = {0, -2, 1};
  EXPECT_ERROR(cpu::cross_entropy_forward_backward(logits.data(), bad.data(), d.data(), 3, 5, pool), "target 5 at row 1 is outside [0, 5)");
  EXPECT_ERROR(cpu::cross_entropy_forward_backward(logits.data(), negative.data(), d.data(), 3, 5, pool), "target -2 at row 1 is outside [0, 5)");
}

TEST(CrossEntropy, ExtremeLogitsStayFinite) {
  ThreadPool pool(1);
  const Floats logits = {1e30f, 0.0f, -1e30f, 88.0f, 89.0f, 90.0f};
  const std::vector<int32_t> targets = {0, 1};
  Floats d(6, NAN);
  const float loss = cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d.data(), 2, 3, pool);
  const double ref = testref::cross_entropy(to_double(logits), targets, 2, 3);
  EXPECT_NEAR(loss, ref, 1e-6 * std::fabs(ref));
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

TEST(CrossEntropy, OneAndTwoThreadsAgreeBitwise) {
  ThreadPool one(1), two(2);
  const int64_t N = 1024, V = 600;
  const Floats logits = random_floats(N * V, 52, -5.0f, 5.0f);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = n % 5 == 0 ? -1 : static_cast<int32_t>((n * 13) % V);
  Floats d[2] = {Floats(N * V, NAN), Floats(N * V, NAN)};
  const float l1 = cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d[0].data(), N, V, one);
  const float l2 = cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d[1].data(), N, V, two);
  EXPECT_EQ(std::memcmp(&l1, &l2, sizeof(float)), 0);
  expect_bitwise_equal(d[0], d[1], "cross-entropy dlogits");
}

}  // namespace
}  // namespace minigpt
