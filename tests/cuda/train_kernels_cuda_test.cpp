// The training kernels on the GPU (the backward launchers of kernels/cuda/{layernorm,gelu,attention,embedding,linear}.h, cross_entropy.h, optimizer.h)
// against the CPU engine's kernels (kernels/cpu/*, train/adamw.h) on random inputs, outputs
// poisoned first. Tolerances: 1e-5 relative per tensor where only the summation order differs;
// the embedding bit for bit (same operations in the same order), AdamW to 1e-6 (the CPU build
// may contract a multiply-add into an FMA); repeated runs bit for bit.
// Skips, saying so, without a GPU; the argument checks run everywhere.
#include "core/thread_pool.h"
#include "expect_error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/optimizer.h"
#include "train/adamw.h"
#include "cuda/train_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using namespace minigpt;
using namespace minigpt::cudatest;

TEST(CudaBackward, LayerNormMatchesCpu) {
  REQUIRE_GPU();
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1024, 64}, {37, 100}, {5, 3}, {100, 1000}}) {
    auto x = random_vec(N * C, 1, 2.0f), dy = random_vec(N * C, 2), w = random_vec(C, 3);
    auto b = random_vec(C, 4);
    for (int64_t c = 0; c < C; ++c) x[c] = 1.5f;  // a constant row
    std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f, pool());
    cpu::layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(),
                            db.data(), N, C, pool());
    DeviceArray<float> gx(x), gdy(dy), gw(w), gdx(N * C), gdw(C), gdb(C);
    DeviceArray<double> partial(cuda::layernorm_backward_scratch(N, C));
    DeviceArray<int> counter(std::vector<int>{0});
    const cuda::LayerNormGradScratch scratch{partial.get(), counter.get(), cuda::layernorm_backward_scratch(N, C)};
    cuda::layernorm_backward(gdy.get(), gx.get(), gw.get(), gdx.get(), false, gdw.get(), gdb.get(), scratch, N, C,
                             1e-5f, nullptr);
    const auto dw1 = gdw.host();
    EXPECT_LE(rel_diff(gdx.host(), dx), 1e-5) << N << "x" << C;
    EXPECT_LE(rel_diff(dw1, dw), 1e-5);
    EXPECT_LE(rel_diff(gdb.host(), db), 1e-5);
    EXPECT_EQ(counter.host()[0], 0);  // left ready for the next call
    cuda::layernorm_backward(gdy.get(), gx.get(), gw.get(), gdx.get(), false, gdw.get(), nullptr, scratch, N, C,
                             1e-5f, nullptr);
    EXPECT_EQ(gdw.host(), dw1);  // the same bits again
    {  // the two halves (data, then params from its partials): the same bits as the one launch
      const auto dx1 = gdx.host(), db1 = gdb.host();
      DeviceArray<float> hdx(std::vector<float>(N * C, NAN)), hdw(std::vector<float>(C, NAN)),
          hdb(std::vector<float>(C, NAN));
      DeviceArray<double> own(cuda::layernorm_backward_scratch(N, C));
      cuda::layernorm_backward_data(gdy.get(), gx.get(), gw.get(), hdx.get(), nullptr, own.get(), N, C, 1e-5f, nullptr);
      cuda::layernorm_backward_params(own.get(), hdw.get(), hdb.get(), N, C, nullptr);
      EXPECT_EQ(hdx.host(), dx1) << N << "x" << C;
      EXPECT_EQ(hdw.host(), dw1) << N << "x" << C;
      EXPECT_EQ(hdb.host(), db1) << N << "x" << C;
      cuda::layernorm_backward_data(gdy.get(), gx.get(), gw.get(), hdx.get(), nullptr, nullptr, N, C, 1e-5f, nullptr);
      EXPECT_EQ(hdx.host(), dx1);  // dx alone
      // out of place, dx = add + LN'(dy) with add left as it was: the bits of the one launch's
      // in-place accumulate (the add may be contracted into an FMA, so not those of add + dx1)
      const auto addv = random_vec(N * C, 6);
      DeviceArray<float> gadd(addv), inplace(addv);
      cuda::layernorm_backward_data(gdy.get(), gx.get(), gw.get(), hdx.get(), gadd.get(), nullptr, N, C, 1e-5f, nullptr);
      cuda::layernorm_backward(gdy.get(), gx.get(), gw.get(), inplace.get(), true, nullptr, nullptr, {}, N, C, 1e-5f,
                               nullptr);
      EXPECT_EQ(hdx.host(), inplace.host()) << N << "x" << C;
      EXPECT_EQ(gadd.host(), addv);
    }
    // accumulate: dx += LN'(dy)
    auto base = random_vec(N * C, 5);
    DeviceArray<float> acc(base);
    cuda::layernorm_backward(gdy.get(), gx.get(), gw.get(), acc.get(), true, nullptr, nullptr, {}, N, C, 1e-5f, nullptr);
    for (int64_t i = 0; i < N * C; ++i) base[i] += dx[i];
    EXPECT_LE(rel_diff(acc.host(), base), 1e-5);
  }
}

TEST(CudaBackward, GeluMatchesCpu) {
  REQUIRE_GPU();
  const int64_t n = 4096 + 3;
  auto x = random_vec(n, 7, 3.0f), dy = random_vec(n, 8);
  x[0] = INFINITY;
  x[1] = -INFINITY;
  std::vector<float> dx(n);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n, pool());
  DeviceArray<float> gx(x), gdy(dy), gdx(n);
  cuda::gelu_backward(gx.get(), gdy.get(), gdx.get(), n, nullptr);
  const auto got = gdx.host();
  EXPECT_EQ(got[0], dy[0]);
  EXPECT_EQ(got[1], 0.0f);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], dx[i], 2e-6 * (1 + std::abs(dy[i]))) << i;
}

TEST(CudaBackward, AttentionMatchesCpu) {
  REQUIRE_GPU();
  struct Case { int64_t B, T, C, NH; };
  for (const Case c : {Case{64, 16, 64, 4}, Case{3, 64, 64, 4}, Case{2, 7, 24, 3}, Case{1, 1, 16, 1}}) {
    const int64_t N = c.B * c.T;
    auto qkv = random_vec(N * 3 * c.C, 11), dout = random_vec(N * c.C, 12);
    std::vector<float> out(N * c.C), att(c.B * c.NH * c.T * c.T), dqkv(N * 3 * c.C);
    cpu::attention_forward(qkv.data(), out.data(), att.data(), c.B, c.T, c.C, c.NH, pool());
    cpu::attention_backward(dout.data(), qkv.data(), att.data(), dqkv.data(), c.B, c.T, c.C, c.NH, pool());
    DeviceArray<float> gqkv(qkv), gdout(dout), gdqkv(N * 3 * c.C);
    cuda::attention_backward(gdout.get(), gqkv.get(), gdqkv.get(), c.B, c.T, c.C, c.NH, nullptr);
    EXPECT_LE(rel_diff(gdqkv.host(), dqkv), 1e-5) << c.B << " " << c.T << " " << c.C << " " << c.NH;
  }
}

TEST(CudaBackward, EmbeddingIsBitwiseTheCpuScatter) {
  REQUIRE_GPU();
  // N = 1024 as the benchmark, N = 1600 past one 1024-id chunk, a ragged small one
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{64, 16}, {100, 16}, {3, 5}}) {
    const int64_t d = 64, V = 600, P = 64, N = B * T;
    auto dx = random_vec(N * d, 21);
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 7919) % 37);  // many repeats
    ids[N - 1] = 599;
    std::vector<float> wte(V * d, 0.0f), wpe(P * d, 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < d; ++j) {
        wte[ids[i] * d + j] += dx[i * d + j];
        wpe[(i % T) * d + j] += dx[i * d + j];
      }
    DeviceArray<float> gdx(dx), gwte(V * d), gwpe(P * d);
    DeviceArray<int32_t> gids(ids);
    cuda::embedding_backward(gdx.get(), gids.get(), gwte.get(), gwpe.get(), B, T, d, V, P, nullptr);
    EXPECT_EQ(gwte.host(), wte) << B << "x" << T;
    EXPECT_EQ(gwpe.host(), wpe) << B << "x" << T;
  }
}

TEST(CudaBackward, LinearMatchesCpuAndRepeatsBitForBit) {
  REQUIRE_GPU();
  DeviceArray<char> workspace(cuda::Cublas::kWorkspaceBytes);
  const cuda::Cublas blas(workspace.get());
  struct Case { int64_t N, in, out; };
  for (const Case c : {Case{1024, 64, 600}, Case{1024, 256, 64}, Case{1000, 64, 192}, Case{3, 5, 7}, Case{129, 33, 31}}) {
    auto x = random_vec(c.N * c.in, 31), W = random_vec(c.out * c.in, 32), dy = random_vec(c.N * c.out, 33);
    std::vector<float> dx(c.N * c.in), dW(c.out * c.in, 0.0f), db(c.out, 0.0f);
    cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), db.data(), c.N, c.in, c.out, pool());
    const cuda::LinearGradScratchSize size = cuda::linear_backward_scratch(c.N, c.in, c.out);
    DeviceArray<float> partial(size.partial);
    DeviceArray<double> partial_db(size.partial_db);
    DeviceArray<int> counters(std::vector<int>(size.counters, 0));
    const cuda::LinearGradScratch scratch{partial.get(), partial_db.get(), counters.get(), size};
    DeviceArray<float> gx(x), gW(W), gdy(dy), gdx(c.N * c.in), gdW(c.out * c.in), gdb(c.out);
    cuda::linear_backward(blas, gx.get(), gW.get(), gdy.get(), gdx.get(), gdW.get(), gdb.get(), c.N, c.in, c.out,
                          scratch, nullptr);
    const auto dW1 = gdW.host();
    EXPECT_LE(rel_diff(gdx.host(), dx), 1e-5) << c.N << " " << c.in << " " << c.out;
    EXPECT_LE(rel_diff(dW1, dW), 1e-5) << c.N << " " << c.in << " " << c.out;
    EXPECT_LE(rel_diff(gdb.host(), db), 1e-6) << c.N << " " << c.in << " " << c.out;
    // again, with the counters the first call left: the same bits
    cuda::linear_backward(blas, gx.get(), gW.get(), gdy.get(), nullptr, gdW.get(), nullptr, c.N, c.in, c.out,
                          scratch, nullptr);
    EXPECT_EQ(gdW.host(), dW1);
    for (const int k : counters.host()) ASSERT_EQ(k, 0);
  }
}

TEST(CudaCrossEntropy, MatchesCpuWithIgnoredTargets) {
  REQUIRE_GPU();
  const int64_t N = 1024, V = 600;
  auto logits = random_vec(N * V, 41, 3.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 5 == 0 ? -1 : static_cast<int32_t>((i * 131) % V);
  std::vector<float> dl(N * V);
  const float loss = cpu::cross_entropy_forward_backward(logits.data(), targets.data(), dl.data(), N, V, pool());
  DeviceArray<float> gl(logits), gloss(1);
  DeviceArray<int32_t> gt(targets);
  DeviceArray<double> rows(N);
  cuda::cross_entropy_forward_backward(gl.get(), gt.get(), gl.get(), rows.get(), gloss.get(), N, V, nullptr);  // in place
  EXPECT_NEAR(gloss.host()[0], loss, 1e-6 * loss);
  EXPECT_LE(rel_diff(gl.host(), dl), 1e-5);
  // every target ignored: loss 0, gradient 0
  std::vector<int32_t> none(N, -1);
  DeviceArray<int32_t> gnone(none);
  DeviceArray<float> g2(logits);
  cuda::cross_entropy_forward_backward(g2.get(), gnone.get(), g2.get(), rows.get(), gloss.get(), N, V, nullptr);
  EXPECT_EQ(gloss.host()[0], 0.0f);
  for (const float v : g2.host()) ASSERT_EQ(v, 0.0f);
}

TEST(CudaOptimizer, NormClipAndAdamWMatchCpu) {
  REQUIRE_GPU();
  // two "tensors": a decayed matrix [0, 5000) and a non-decayed vector [5000, 5100)
  const int64_t n = 5100;
  auto p = random_vec(n, 51), g = random_vec(n, 52, 0.1f), m = random_vec(n, 53, 0.01f);
  auto v = random_vec(n, 54, 0.01f);
  for (float& x : v) x = x * x;
  const AdamWConfig cfg;
  const float lr = 3e-3f, max_norm = 1.0f;
  const int64_t t = 7;
  // CPU: norm (double), clip, adamw_update per tensor
  double ss = 0.0;
  for (const float x : g) ss += static_cast<double>(x) * x;
  const double norm = std::sqrt(ss);
  ASSERT_GT(norm, max_norm);  // the clipping path is taken
  std::vector<float> pc = p, gc = g, mc = m, vc = v;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
  for (float& x : gc) x *= scale;
  adamw_update(pc.data(), gc.data(), mc.data(), vc.data(), 5000, lr, cfg.weight_decay, cfg, t);
  adamw_update(pc.data() + 5000, gc.data() + 5000, mc.data() + 5000, vc.data() + 5000, 100, lr, 0.0f, cfg, t);
  // GPU
  const double bc1 = 1.0 - std::pow(static_cast<double>(cfg.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(cfg.beta2), static_cast<double>(t));
  const cuda::AdamWScalars sc{static_cast<float>(lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
                              1.0f - lr * cfg.weight_decay, cfg.beta1, cfg.beta2, 1.0f - cfg.beta1,
                              1.0f - cfg.beta2, cfg.eps};
  std::vector<cuda::AdamWChunk> chunks{{0, 4096, 1}, {4096, 5000, 1}, {5000, 5100, 0}};
  DeviceArray<float> gp(p), gg(g), gm(m), gv(v);
  DeviceArray<double> partials(std::vector<double>(cuda::kNormScratch, 0.0));
  DeviceArray<cuda::GradNorm> gn(1);
  DeviceArray<cuda::AdamWScalars> gsc(std::vector<cuda::AdamWScalars>{sc});
  DeviceArray<cuda::AdamWChunk> gch(chunks);
  cuda::grad_norm(gg.get(), n, partials.get(), max_norm, gn.get(), nullptr);
  cuda::adamw(gp.get(), gg.get(), gm.get(), gv.get(), gch.get(), 3, gsc.get(), gn.get(), nullptr);
  const cuda::GradNorm got = gn.host()[0];
  EXPECT_NEAR(got.norm, norm, 1e-12 * norm);
  EXPECT_EQ(got.scale, scale);
  // The CPU build may fuse a multiply and an add (GCC contracts them in C++ by default), the
  // kernel does not: the same formula to an ulp or two.
  EXPECT_LE(rel_diff(gp.host(), pc), 1e-6);
  EXPECT_LE(rel_diff(gm.host(), mc), 1e-6);
  EXPECT_LE(rel_diff(gv.host(), vc), 1e-6);
  // a non-finite gradient: nothing is updated
  std::vector<float> bad = g;
  bad[17] = NAN;
  DeviceArray<float> gbad(bad), gp2(p);
  cuda::grad_norm(gbad.get(), n, partials.get(), max_norm, gn.get(), nullptr);
  cuda::adamw(gp2.get(), gbad.get(), gm.get(), gv.get(), gch.get(), 3, gsc.get(), gn.get(), nullptr);
  EXPECT_FALSE(std::isfinite(gn.host()[0].norm));  // the second call finished too: the counter was left 0
  EXPECT_EQ(gp2.host(), p);
  EXPECT_EQ(partials.host()[cuda::kNormBlocks], 0.0);  // and is again
}

TEST(CudaBackward, BadSizesAreErrors) {
  EXPECT_ERROR(cuda::attention_backward(nullptr, nullptr, nullptr, 1, 4, 10, 3, nullptr), "bad sizes");
  EXPECT_ERROR(cuda::attention_backward(nullptr, nullptr, nullptr, 1, 512, 64, 1, nullptr), "shared memory");
  EXPECT_ERROR(cuda::layernorm_backward(nullptr, nullptr, nullptr, nullptr, false, nullptr, nullptr, {}, -1, 4,
                                        1e-5f, nullptr),
               "bad sizes");
  float dummy = 0.0f;
  EXPECT_ERROR(cuda::layernorm_backward(nullptr, nullptr, nullptr, nullptr, false, &dummy, nullptr, {}, 4, 4, 1e-5f,
                                        nullptr),
               "scratch");
  EXPECT_ERROR(cuda::layernorm_backward_params(nullptr, &dummy, nullptr, 4, 4, nullptr), "no partials");
  EXPECT_ERROR(cuda::layernorm_backward_data(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-5f, nullptr),
               "bad sizes");
}

}  // namespace
