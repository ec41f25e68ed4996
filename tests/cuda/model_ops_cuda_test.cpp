// The model's CUDA ops (kernels/cuda/{embedding,layernorm,gelu,attention,linear,gemm}.h) and the
// arena (core/cuda_arena.h) against the CPU engine's kernels (kernels/cpu), the references:
// odd shapes (rows not a multiple of a tile, K not a multiple of 32), in place where allowed,
// outputs poisoned with NaN first so every element must be written, B = 0. Tolerance 1e-5
// absolute on values of order 1 (measured differences are ~1e-7: float sums in another order).
// Tests that launch skip without a GPU; the argument checks run everywhere.
#include "core/cuda_arena.h"
#include "core/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "expect_error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpt_layer.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "layers_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

using namespace minigpt;
using namespace minigpt::cudatest;
using testref::random_floats;

constexpr double kTol = 1e-5;
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CudaArena, SlotsAlignedAndOutOfMemoryNamesTheBytes) {
  REQUIRE_GPU();
  CudaArena arena(4096);
  void* a = arena.allocate(10, "a");
  void* b = arena.allocate(300, "b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % CudaArena::kAlignment, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
  EXPECT_EQ(arena.used(), 256u + 512u);
  EXPECT_ERROR(arena.allocate(8192, "too big"), "slot 'too big' asks for 8192 bytes");
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.allocate(16, "again"), a);
  EXPECT_ERROR(CudaArena(size_t{1} << 50), "could not allocate 1125899906842624 bytes");
}

TEST(CudaArena, WithoutAGpuTheErrorNamesTheBytes) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA GPU is visible: the out-of-memory case is the test above";
  EXPECT_ERROR(CudaArena(1000), "CUDA arena: could not allocate 1024 bytes");
}

TEST(CudaEmbedding, MatchesTheCpuGather) {
  REQUIRE_GPU();
  const int64_t B = 3, T = 5, C = 24, V = 11, P = 7;
  const auto wte = random_floats(V * C, 1), wpe = random_floats(P * C, 2);
  std::vector<int32_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7) % V);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_x(B * T * C);
  cuda::embedding_forward(d_ids.get(), d_wte.get(), d_wpe.get(), d_x.get(), B, T, C, V, P, nullptr);
  const auto x = d_x.host();
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(x[r * C + c], wte[ids[r] * C + c] + wpe[(r % T) * C + c]) << r << "," << c;
  // decode: token and position read on the device; a bad id gives NaN, never a stray read
  DeviceArray<int32_t> state(std::vector<int32_t>{4, 6});
  DeviceArray<float> row(C);
  cuda::embedding_decode(state.get(), state.get() + 1, d_wte.get(), d_wpe.get(), row.get(), C, V, P, nullptr);
  const auto xr = row.host();
  for (int64_t c = 0; c < C; ++c) ASSERT_EQ(xr[c], wte[4 * C + c] + wpe[6 * C + c]);
  DeviceArray<int32_t> bad(std::vector<int32_t>{int32_t(V), 0});
  cuda::embedding_decode(bad.get(), bad.get() + 1, d_wte.get(), d_wpe.get(), row.get(), C, V, P, nullptr);
  for (float v : row.host()) ASSERT_TRUE(std::isnan(v));
}

TEST(CudaLayerNorm, MatchesTheCpuKernelAndAConstantRowIsExactlyTheBias) {
  REQUIRE_GPU();
  ThreadPool pool(1);
  for (int64_t C : {64, 37, 256}) {
    const int64_t N = 13;
    auto x = random_floats(N * C, 3, -3.0f, 3.0f);
    for (int64_t c = 0; c < C; ++c) x[c] = 0.1f;  // row 0 constant
    const auto w = random_floats(C, 4), b = random_floats(C, 5);
    std::vector<float> y(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C,
                           1e-5f, pool);
    DeviceArray<float> dx(x), dw(w), db(b), dy(N * C), dm(N), dr(N);
    cuda::layernorm_forward(dx.get(), dw.get(), db.get(), dy.get(), dm.get(), dr.get(), N, C, 1e-5f, nullptr);
    const auto gy = dy.host();
    EXPECT_LE(max_abs_diff(gy, y), kTol) << "C=" << C;
    EXPECT_LE(max_abs_diff(dm.host(), mean), kTol);
    EXPECT_LE(max_abs_diff(dr.host(), rstd), 1e-4);
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(gy[c], b[c]) << "constant row, column " << c;
    // in place
    cuda::layernorm_forward(dx.get(), dw.get(), db.get(), dx.get(), nullptr, nullptr, N, C, 1e-5f, nullptr);
    EXPECT_LE(max_abs_diff(dx.host(), y), kTol);
  }
  cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 64, 1e-5f, nullptr);
}

TEST(CudaGelu, MatchesTheCpuKernelAndTheSpecialValues) {
  REQUIRE_GPU();
  ThreadPool pool(1);
  auto x = random_floats(1003, 6, -8.0f, 8.0f);
  x[0] = -kInf;
  x[1] = kInf;
  x[2] = std::numeric_limits<float>::quiet_NaN();
  x[3] = 0.0f;
  std::vector<float> y(x.size());
  cpu::gelu_forward(x.data(), y.data(), static_cast<int64_t>(x.size()), pool);
  DeviceArray<float> dx(x), dy(x.size());
  cuda::gelu_forward(dx.get(), dy.get(), static_cast<int64_t>(x.size()), nullptr);
  const auto g = dy.host();
  EXPECT_TRUE(g[0] == 0.0f && std::signbit(g[0])) << "GELU(-inf) must be -0, got " << g[0];
  EXPECT_EQ(g[1], kInf);
  EXPECT_TRUE(std::isnan(g[2]));
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_LE(max_abs_diff(g.data() + 4, y.data() + 4, x.size() - 4), 2e-6);
}

// The attention core against cpu::attention_forward at the model's shapes and past one
// 64-query tile (T = 100), for every supported head dim.
TEST(CudaAttention, MatchesTheCpuKernel) {
  REQUIRE_GPU();
  ThreadPool pool(1);
  struct Case { int64_t B, T, C, NH; };
  for (const Case& k : {Case{2, 16, 64, 4}, Case{1, 1, 64, 4}, Case{3, 64, 64, 4}, Case{2, 100, 64, 4},
                        Case{2, 9, 64, 8}, Case{1, 70, 64, 2}, Case{1, 33, 64, 1}}) {
    const auto qkv = random_floats(k.B * k.T * 3 * k.C, 7, -2.0f, 2.0f);
    std::vector<float> out(k.B * k.T * k.C);
    cpu::attention_forward(qkv.data(), out.data(), nullptr, k.B, k.T, k.C, k.NH, pool);
    DeviceArray<float> dq(qkv), dout(out.size()), dlse(k.B * k.NH * k.T);
    cuda::attention_forward(dq.get(), dout.get(), dlse.get(), k.B, k.T, k.C, k.NH, nullptr);
    EXPECT_LE(max_abs_diff(dout.host(), out), kTol) << "B=" << k.B << " T=" << k.T << " NH=" << k.NH;
    // lse of row (b=0, h=0, t=0): one key, so lse = its scaled score
    const int64_t dh = k.C / k.NH;
    double s = 0.0;
    for (int64_t d = 0; d < dh; ++d) s += double(qkv[d]) * qkv[k.C + d];
    EXPECT_NEAR(dlse.host()[0], s / std::sqrt(double(dh)), 1e-5);
  }
}

// The decode step against cpu::attention_decode_step, position by position, with the cache
// filled by the kernel itself.
TEST(CudaAttention, DecodeStepMatchesTheCpuAndWritesTheCache) {
  REQUIRE_GPU();
  const int64_t C = 64, NH = 4, cap = 40;
  std::vector<float> kc(cap * C, 0.0f), vc(cap * C, 0.0f), out(C);
  DeviceArray<float> dk(kc), dv(vc), dout(C);
  for (int64_t t = 0; t < 37; ++t) {
    const auto qkv = random_floats(3 * C, 100 + static_cast<uint32_t>(t), -2.0f, 2.0f);
    std::copy(qkv.begin() + C, qkv.begin() + 2 * C, kc.begin() + t * C);
    std::copy(qkv.begin() + 2 * C, qkv.end(), vc.begin() + t * C);
    cpu::attention_decode_step(qkv.data(), kc.data(), vc.data(), out.data(), t, C, NH);
    DeviceArray<float> dq(qkv);
    DeviceArray<int32_t> pos(std::vector<int32_t>{static_cast<int32_t>(t)});
    cuda::attention_decode(dq.get(), dk.get(), dv.get(), pos.get(), dout.get(), C, NH, cap, nullptr);
    ASSERT_LE(max_abs_diff(dout.host(), out), kTol) << "position " << t;
  }
  EXPECT_EQ(max_abs_diff(dk.host(), kc), 0.0);
  EXPECT_EQ(max_abs_diff(dv.host(), vc), 0.0);
  DeviceArray<int32_t> full(std::vector<int32_t>{static_cast<int32_t>(cap)});
  DeviceArray<float> dq(3 * C);
  cuda::attention_decode(dq.get(), dk.get(), dv.get(), full.get(), dout.get(), C, NH, cap, nullptr);
  for (float v : dout.host()) ASSERT_TRUE(std::isnan(v)) << "a position past the cache gives NaN";
}

// One fused Linear case against the CPU: ln (optional, cpu::layernorm_forward) then
// cpu::linear_forward with the same epilogue.
struct LinearCase {
  int64_t M, K, N;
  bool ln, gelu, residual;
};

void check_linear(const LinearCase& k, bool cublas) {
  ThreadPool pool(1);
  const auto x = random_floats(k.M * k.K, 11, -2.0f, 2.0f);
  const auto W = random_floats(k.N * k.K, 12, -0.3f, 0.3f);
  const auto b = random_floats(k.N, 13), lw = random_floats(k.K, 14), lb = random_floats(k.K, 15);
  const auto res = random_floats(k.M * k.N, 16);
  std::vector<float> xin = x;
  if (k.ln)
    cpu::layernorm_forward(x.data(), lw.data(), lb.data(), xin.data(), nullptr, nullptr, k.M, k.K, 1e-5f, pool);
  std::vector<float> y = res, grad(k.M * k.N);
  cpu::linear_forward(xin.data(), W.data(), b.data(), y.data(), k.M, k.K, k.N, pool,
                      {.residual = k.residual ? y.data() : nullptr, .gelu = k.gelu,
                       .gelu_grad = k.gelu ? grad.data() : nullptr});
  DeviceArray<float> dx(x), dW(W), db(b), dlw(lw), dlb(lb), dy(res), dg(k.M * k.N);
  cuda::LinearFusion f;
  if (k.ln) f = {.ln_weight = dlw.get(), .ln_bias = dlb.get(), .ln_eps = 1e-5f};
  f.gelu = k.gelu;
  f.gelu_grad = k.gelu ? dg.get() : nullptr;
  f.residual = k.residual ? dy.get() : nullptr;  // in place: y = y + ...
  if (!cublas) {
    cuda::linear_forward(dx.get(), dW.get(), db.get(), dy.get(), k.M, k.K, k.N, f, nullptr);
  } else {
    DeviceArray<float> ws(cuda::Cublas::kWorkspaceBytes / sizeof(float)), dln(k.M * k.K), dt(k.M * k.N);
    cuda::Cublas blas(ws.get());
    const float* in = dx.get();
    if (k.ln) {
      cuda::layernorm_forward(dx.get(), dlw.get(), dlb.get(), dln.get(), nullptr, nullptr, k.M, k.K, 1e-5f, nullptr);
      in = dln.get();
    }
    cuda::linear_gemm(blas, in, dW.get(), dt.get(), k.M, k.K, k.N, nullptr);
    f.ln_weight = f.ln_bias = nullptr;
    cuda::linear_epilogue(dt.get(), db.get(), k.M, k.N, f, nullptr);
    MINIGPT_CUDA_CHECK(cudaMemcpy(dy.get(), dt.get(), k.M * k.N * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  const std::string what = (cublas ? "cublas " : "fused ") + std::to_string(k.M) + "x" +
                           std::to_string(k.K) + "x" + std::to_string(k.N);
  EXPECT_LE(max_abs_diff(dy.host(), y), kTol) << what;
  if (k.gelu) {
    EXPECT_LE(max_abs_diff(dg.host(), grad), kTol) << what << " gelu_grad";
  }
}

TEST(CudaLinear, FusedAndCublasMatchTheCpuLinear) {
  REQUIRE_GPU();
  for (bool cublas : {false, true})
    for (const LinearCase& k :
         {LinearCase{32, 64, 192, true, false, false}, LinearCase{32, 64, 64, false, false, true},
          LinearCase{32, 64, 256, true, true, false}, LinearCase{32, 256, 64, false, false, true},
          LinearCase{32, 64, 600, true, false, false}, LinearCase{1, 64, 600, true, false, false},
          LinearCase{45, 37, 70, true, true, true}, LinearCase{300, 256, 64, false, false, false}})
      check_linear(k, cublas);
}

TEST(CudaGemm, TransposeFlagsMatchAPlainLoop) {
  REQUIRE_GPU();
  const int64_t m = 7, n = 5, k = 9;
  const auto A = random_floats(m * k, 21), B = random_floats(k * n, 22), C0 = random_floats(m * n, 23);
  DeviceArray<float> ws(cuda::Cublas::kWorkspaceBytes / sizeof(float));
  cuda::Cublas blas(ws.get());
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // A stored (m, k) or, transposed, (k, m); B (k, n) or (n, k)
      std::vector<float> At(A.size()), Bt(B.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) At[ta ? j * m + i : i * k + j] = A[i * k + j];
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) Bt[tb ? j * k + i : i * n + j] = B[i * n + j];
      std::vector<float> want(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.5 * C0[i * n + j];
          for (int64_t p = 0; p < k; ++p) s += 2.0 * A[i * k + p] * B[p * n + j];
          want[i * n + j] = static_cast<float>(s);
        }
      DeviceArray<float> dA(At), dB(Bt), dC(C0);
      cuda::gemm(blas, ta, tb, m, n, k, 2.0f, dA.get(), ta ? m : k, dB.get(), tb ? k : n, 0.5f,
                 dC.get(), n, nullptr);
      EXPECT_LE(max_abs_diff(dC.host(), want), 1e-5) << "trans_a=" << ta << " trans_b=" << tb;
    }
}

std::vector<float> transposed(const std::vector<float>& W, int64_t out, int64_t in) {
  std::vector<float> t(W.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t[i * out + o] = W[o * in + i];
  return t;
}

// attention_front against the CPU ops it fuses (embedding, layernorm, qkv Linear, attention):
// a forward from position 0 (the cache is a (B, T, C) scratch), then decode rows at positions
// read on the device against the same CPU composition over the longer prefix.
TEST(CudaGptLayer, AttentionFrontMatchesTheCpuOps) {
  REQUIRE_GPU();
  ThreadPool pool(1);
  const int64_t B = 2, T = 13, C = 64, NH = 4, V = 40, P = 20;
  const auto wte = random_floats(V * C, 31), wpe = random_floats(P * C, 32);
  const auto lw = random_floats(C, 33), lb = random_floats(C, 34);
  const auto W = random_floats(3 * C * C, 35, -0.2f, 0.2f), bq = random_floats(3 * C, 36);
  std::vector<int32_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 13 + 5) % V);
  // CPU: x = embed, qkv = ln(x) W^T + b, out = attention(qkv)
  std::vector<float> x(B * T * C), ln(B * T * C), qkv(B * T * 3 * C), out(B * T * C);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) x[r * C + c] = wte[ids[r] * C + c] + wpe[(r % T) * C + c];
  cpu::layernorm_forward(x.data(), lw.data(), lb.data(), ln.data(), nullptr, nullptr, B * T, C, 1e-5f, pool);
  cpu::linear_forward(ln.data(), W.data(), bq.data(), qkv.data(), B * T, C, 3 * C, pool);
  cpu::attention_forward(qkv.data(), out.data(), nullptr, B, T, C, NH, pool);

  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_lw(lw), d_lb(lb), d_W(W), d_b(bq), d_x(B * T * C),
      d_k(B * T * C), d_v(B * T * C), d_att(B * T * C);
  cuda::AttentionFront a;
  a.ids = d_ids.get();
  a.wte = d_wte.get();
  a.wpe = d_wpe.get();
  a.x_out = d_x.get();
  a.ln_weight = d_lw.get();
  a.ln_bias = d_lb.get();
  a.qkv_weight = d_W.get();
  a.qkv_bias = d_b.get();
  a.k_cache = d_k.get();
  a.v_cache = d_v.get();
  a.att = d_att.get();
  cuda::attention_front(a, B, T, C, NH, T, V, P, nullptr);
  EXPECT_LE(max_abs_diff(d_x.host(), x), kTol) << "embedding";
  EXPECT_LE(max_abs_diff(d_att.host(), out), kTol) << "attention output";
  // the same from x instead of ids
  a.ids = nullptr;
  a.x = d_x.get();
  cuda::attention_front(a, B, T, C, NH, T, V, P, nullptr);
  EXPECT_LE(max_abs_diff(d_att.host(), out), kTol) << "attention output from x";

  // decode: sequence 0 one row at a time at positions 0..T-1 in a cache of P rows
  DeviceArray<float> kc(P * C), vc(P * C), row(C), xr(C);
  for (int64_t t = 0; t < T; ++t) {
    DeviceArray<int32_t> id(std::vector<int32_t>{ids[t]}), pos(std::vector<int32_t>{static_cast<int32_t>(t)});
    a.ids = id.get();
    a.x_out = xr.get();
    a.k_cache = kc.get();
    a.v_cache = vc.get();
    a.pos = pos.get();
    a.att = row.get();
    cuda::attention_front(a, 1, 1, C, NH, P, V, P, nullptr);
    ASSERT_LE(max_abs_diff(row.host().data(), out.data() + t * C, C), kTol) << "decode position " << t;
  }
  DeviceArray<int32_t> full(std::vector<int32_t>{static_cast<int32_t>(P)});
  a.pos = full.get();
  cuda::attention_front(a, 1, 1, C, NH, P, V, P, nullptr);
  for (float v : row.host()) ASSERT_TRUE(std::isnan(v)) << "a position past the cache gives NaN";
}

// proj_mlp and lm_head_softmax against the CPU ops they fuse, at odd row counts.
TEST(CudaGptLayer, ProjMlpAndLmHeadMatchTheCpuOps) {
  REQUIRE_GPU();
  ThreadPool pool(1);
  const int64_t C = 64, F = 256;
  for (int64_t M : {1, 7, 32}) {
    for (int64_t V : {50, 611}) {
      const auto att = random_floats(M * C, 41), x0 = random_floats(M * C, 42, -2.0f, 2.0f);
      const auto Wp = random_floats(C * C, 43, -0.2f, 0.2f), bp = random_floats(C, 44);
      const auto lw = random_floats(C, 45), lb = random_floats(C, 46);
      const auto W1 = random_floats(F * C, 47, -0.2f, 0.2f), b1 = random_floats(F, 48);
      const auto W2 = random_floats(C * F, 49, -0.1f, 0.1f), b2 = random_floats(C, 50);
      const auto Wl = random_floats(V * C, 51, -0.3f, 0.3f), bl = random_floats(V, 52);
      std::vector<float> x = x0, ln(M * C), h(M * F), logits(M * V), probs(M * V);
      cpu::linear_forward(att.data(), Wp.data(), bp.data(), x.data(), M, C, C, pool, {.residual = x.data()});
      cpu::layernorm_forward(x.data(), lw.data(), lb.data(), ln.data(), nullptr, nullptr, M, C, 1e-5f, pool);
      cpu::linear_forward(ln.data(), W1.data(), b1.data(), h.data(), M, C, F, pool, {.gelu = true});
      cpu::linear_forward(h.data(), W2.data(), b2.data(), x.data(), M, F, C, pool, {.residual = x.data()});
      cpu::layernorm_forward(x.data(), lw.data(), lb.data(), ln.data(), nullptr, nullptr, M, C, 1e-5f, pool);
      cpu::linear_forward(ln.data(), Wl.data(), bl.data(), logits.data(), M, C, V, pool);
      cpu::softmax(logits.data(), probs.data(), M, V, pool);

      DeviceArray<float> d_att(att), d_x(x0), d_Wp(transposed(Wp, C, C)), d_bp(bp), d_lw(lw), d_lb(lb),
          d_W1(transposed(W1, F, C)), d_b1(b1), d_W2(transposed(W2, C, F)), d_b2(b2),
          d_Wl(transposed(Wl, V, C)), d_bl(bl), d_logits(M * V), d_probs(M * V);
      cuda::ProjMlp p;
      p.att = d_att.get();
      p.x = d_x.get();
      p.proj_wt = d_Wp.get();
      p.proj_bias = d_bp.get();
      p.ln_weight = d_lw.get();
      p.ln_bias = d_lb.get();
      p.fc1_wt = d_W1.get();
      p.fc1_bias = d_b1.get();
      p.fc2_wt = d_W2.get();
      p.fc2_bias = d_b2.get();
      cuda::proj_mlp(p, M, C, F, nullptr);
      EXPECT_LE(max_abs_diff(d_x.host(), x), kTol) << "proj_mlp M=" << M;
      cuda::lm_head_softmax(d_x.get(), d_lw.get(), d_lb.get(), 1e-5f, d_Wl.get(), d_bl.get(), d_logits.get(),
                            d_probs.get(), M, C, V, nullptr);
      EXPECT_LE(max_abs_diff(d_logits.host(), logits), kTol) << "logits M=" << M << " V=" << V;
      EXPECT_LE(max_abs_diff(d_probs.host(), probs), 1e-6) << "probs M=" << M << " V=" << V;
    }
  }
}

// Argument checks run before any device work: these need no GPU.
TEST(CudaModelOps, BadArgumentsAreClearErrors) {
  EXPECT_ERROR(cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 60, 4, nullptr),
               "head dim 15 not supported");
  EXPECT_ERROR(cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 64, 5, nullptr),
               "not a multiple of NH=5");
  EXPECT_ERROR(cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 64, 1e-5f, nullptr),
               "bad shape N=-1");
  EXPECT_ERROR(cuda::embedding_forward(nullptr, nullptr, nullptr, nullptr, 1, 9, 8, 10, 8, nullptr),
               "bad shape B=1 T=9 (positions 8)");
  float dummy = 0.0f;
  EXPECT_ERROR(cuda::linear_forward(&dummy, &dummy, nullptr, &dummy, 1, 1, 1, {}, nullptr),
               "y must not alias x");
  EXPECT_ERROR(cuda::linear_epilogue(&dummy, nullptr, 1, 1, {.ln_weight = &dummy, .ln_bias = &dummy}, nullptr),
               "cannot follow the product");
  EXPECT_ERROR(cuda::gelu_forward(nullptr, nullptr, -1, nullptr), "negative size -1");
  // B == 0: nothing launched, no error, null pointers allowed
  cuda::attention_forward(nullptr, nullptr, nullptr, 0, 4, 64, 4, nullptr);
  cuda::linear_forward(nullptr, nullptr, nullptr, nullptr, 0, 64, 64, {}, nullptr);
}

}  // namespace
