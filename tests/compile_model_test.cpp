// Compiled against eager, end to end (the generated code compiled by the JIT and run):
// TinyHead (seed 42, x (2, 64)) within 1e-6; the whole model, shipped and random weights,
// logits within 1e-5 and the same top-1 on every grammar probe; the decode step equal to
// the eager decode step; the shape guard compiling anew; the debug files.
#include "compile/capture.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/isa.h"
#include "data/probes.h"
#include "data/tokenizer.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/softmax.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include "compile_model_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

using namespace minigpt;
using namespace minigpt::compile;
using testcompile::max_abs_diff;
using testcompile::random_weights;

namespace {

const std::string kModel = std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors";
const std::string kProbes = std::string(MINIGPT_SOURCE_DIR) + "/tests/probes/grammar_probes.tsv";

// The JIT cache of these tests: a folder of the build tree (warm across test runs).
CompileOptions test_options() {
  CompileOptions o;
  o.cache_dir = std::filesystem::path(MINIGPT_BINARY_DIR) / "compile_test_cache";
  o.quiet = true;
  return o;
}



void expect_model_matches(const GrammarMiniGPT& model, int64_t B, int64_t T, uint64_t seed,
                          CompileOptions opt = test_options()) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (int32_t& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(model.config().vocab_size));
  ThreadPool pool(2);
  Tensor el, ep, cl, cp;
  model.forward(ids.data(), B, T, el, ep, pool);
  CompiledModel cm(model, opt);
  cm.forward(ids.data(), B, T, cl, cp, pool);
  const float dl = max_abs_diff(el.data(), cl.data(), el.numel());
  EXPECT_LT(dl, 1e-5f) << "logits";
  // The probabilities, element by element (p the compiled one):
  // - the compiled softmax kernel alone, against eager's softmax of the compiled logits:
  //   |dp| <= 1e-6 + 1e-5 p. Both sum the V exps of a row in float, in different orders (eager's
  //   scalar path one lane, sequentially; the compiled kernel MG_W lanes, then the lanes); a
  //   sum's rounding is relative to the sum, and p = exp / sum inherits it: relative, up to
  //   (V - 1) 2^-24 = 3.6e-5 in the worst case, measured 5.0e-6 p under MINIGPT_ISA=scalar and
  //   7.5e-7 p under avx512 at (64, 16) on the shipped model. 1e-5 is design.md's fp32 rtol.
  // - end to end, p also inherits the logits' difference: to first order a change dl of the
  //   logits moves p_i by p_i (dl_i - sum_j p_j dl_j), at most 2 p_i (1 - p_i) max|dl|.
  const int64_t V = model.config().vocab_size;
  Tensor sp = Tensor::empty({cl.numel() / V, V});
  cpu::softmax(cl.data(), sp.data(), sp.shape()[0], V, pool);
  float ds = 0, dp = 0;
  int64_t bad_softmax = 0, bad_probs = 0;
  for (int64_t i = 0; i < cp.numel(); ++i) {
    const float p = cp.data()[i];
    const float d_alone = std::fabs(sp.data()[i] - p), d_end = std::fabs(ep.data()[i] - p);
    const float softmax_tol = 1e-6f + 1e-5f * p;
    bad_softmax += !(d_alone <= softmax_tol);  // NaN fails
    bad_probs += !(d_end <= softmax_tol + 2.0f * p * (1.0f - p) * dl);
    ds = std::max(ds, d_alone);
    dp = std::max(dp, d_end);
  }
  EXPECT_EQ(bad_softmax, 0) << "probs against eager's softmax of the compiled logits (max |diff| " << ds << ")";
  EXPECT_EQ(bad_probs, 0) << "probs against eager's (max |diff| " << dp << ")";
  std::printf("compiled vs eager (B=%lld, T=%lld): max |logits diff| %.3g, max |probs diff| %.3g (softmax alone %.3g)\n",
              static_cast<long long>(B), static_cast<long long>(T), dl, dp, ds);
}

}  // namespace

TEST(CompileModel, TinyHeadMatchesEagerWithin1e6) {
  const TinyHead head = TinyHead::init(42);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd;
  Tensor x = Tensor::empty({2, TinyHead::kIn});
  for (float& v : x.span()) v = nd(rng);
  Tensor eager = Tensor::empty({2, TinyHead::kOut}), compiled = Tensor::full({2, TinyHead::kOut}, NAN);
  ThreadPool pool(1);
  head.forward(x.data(), 2, eager.data(), pool);
  WeightBinding w = bind_tinyhead(head);
  CompiledGraph cg(capture_tinyhead(2), w, test_options());
  const void* in[] = {x.data()};
  float* out[] = {compiled.data()};
  cg.run(in, out, pool);
  const float diff = max_abs_diff(eager.data(), compiled.data(), eager.numel());
  EXPECT_LT(diff, 1e-6f);
  std::printf("TinyHead compiled vs eager: max abs diff %.3g\n", diff);
  RecordProperty("max_abs_diff", std::to_string(diff));
  double sum = 0;
  for (int64_t c = 0; c < TinyHead::kOut; ++c) sum += compiled.at({0, c});
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(CompileModel, SoftmaxEdgeRowsFollowTheProjectNumerics) {
  // [1e30, 0, -1e30, ...] -> [1, 0, 0, ...] exactly; a NaN row and an all -inf row -> NaN rows.
  GraphBuilder b("softmax_edges");
  const int x = b.input("x", {3, 40});
  b.output(b.softmax(x, "y", "softmax (cpu::softmax)"), "y");
  const Graph g = b.finish();
  WeightBinding none;
  CompiledGraph cg(g, none, test_options());
  Tensor in = Tensor::zeros({3, 40}), out = Tensor::empty({3, 40});
  in.at({0, 0}) = 1e30f;
  in.at({0, 2}) = -1e30f;
  in.at({1, 5}) = NAN;
  for (int64_t c = 0; c < 40; ++c) in.at({2, c}) = -INFINITY;
  const void* ins[] = {in.data()};
  float* outs[] = {out.data()};
  ThreadPool pool(1);
  cg.run(ins, outs, pool);
  EXPECT_EQ(out.at({0, 0}), 1.0f);
  for (int64_t c = 1; c < 40; ++c) EXPECT_EQ(out.at({0, c}), 0.0f);
  for (int64_t c = 0; c < 40; ++c) {
    EXPECT_TRUE(std::isnan(out.at({1, c})));
    EXPECT_TRUE(std::isnan(out.at({2, c})));
  }
}

TEST(CompileModel, LayerNormInRowBlocksMatchesEagerAndZeroesAConstantRow) {
  // 37 rows of 64 with 16 lanes: rows [0, 32) in two 16-row blocks (statistics along the lanes),
  // rows [32, 37) one by one. A constant row (in a block and in the rest) gives exactly the bias;
  // every row within 1e-6 of eager's; a row gives the same bits in a block as alone (the block's
  // trees are the per-row trees' adds).
  const int64_t R = 37, C = 64;
  GraphBuilder bld("layernorm_blocks");
  const int x = bld.input("x", {R, C});
  const int w = bld.weight("w", {C}), bb = bld.weight("b", {C});
  bld.output(bld.layernorm(x, w, bb, 1e-5f, "y", "ln (cpu::layernorm_forward)"), "y");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor in = Tensor::empty({R, C}), gain = Tensor::empty({C}), bias = Tensor::empty({C});
  for (int64_t i = 0; i < in.numel(); ++i) in.data()[i] = 3.0f * nd(rng) + 100.0f;  // a large mean: float sums would lose ~3e-6 here
  for (int64_t c = 0; c < C; ++c) {
    gain.data()[c] = 1.0f + 0.1f * nd(rng);
    bias.data()[c] = 0.1f * nd(rng);
    in.at({5, c}) = 1.7f;   // constant rows: one in a block,
    in.at({34, c}) = -3.1f;  // one in the rest
  }
  WeightBinding wb;
  wb.values = {{"w", gain.data()}, {"b", bias.data()}};
  CompileOptions o = test_options();
  o.codegen.vec_width = 16;
  CompiledGraph cg(bld.finish(), wb, o);
  EXPECT_NE(cg.code().source.find("mg_hsumd16(acc"), std::string::npos) << "the 16-row blocks";
  ThreadPool pool(1);
  Tensor out = Tensor::empty({R, C}), eager = Tensor::empty({R, C}), mean = Tensor::empty({R}), rstd = Tensor::empty({R});
  const void* ins[] = {in.data()};
  float* outs[] = {out.data()};
  cg.run(ins, outs, pool);
  cpu::layernorm_forward(in.data(), gain.data(), bias.data(), eager.data(), mean.data(), rstd.data(), R, C, 1e-5f, pool);
  const float diff = max_abs_diff(eager.data(), out.data(), out.numel());
  EXPECT_LT(diff, 1e-6f);
  std::printf("layernorm in row blocks vs eager: max abs diff %.3g\n", diff);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(out.at({5, c}), bias.data()[c]);
    EXPECT_EQ(out.at({34, c}), bias.data()[c]);
  }
  // row 3 (in the first block) copied to row 35 (in the rest): the same bits
  for (int64_t c = 0; c < C; ++c) in.at({35, c}) = in.at({3, c});
  cg.run(ins, outs, pool);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out.at({35, c}), out.at({3, c})) << c;
}

TEST(CompileModel, ExpOfAnyInputMatchesStdExp) {
  // exp of a graph input (not a softmax's x - max: the argument may be positive) takes the
  // generated exp with its overflow test: within 2 ulp of std::exp where finite, 0 below
  // -86.98868 (results under 1.7e-38), +inf above 88.72283 (88.5 stays finite: 2^n with
  // n = 128), NaN kept
  GraphBuilder b("exp_any");
  const int x = b.input("x", {2, 37});  // a vector part and a scalar tail
  b.output(b.unary(Op::Exp, x, "y", "std::exp"), "y");
  WeightBinding none;
  CompiledGraph cg(b.finish(), none, test_options());
  Tensor in = Tensor::empty({2, 37}), out = Tensor::empty({2, 37});
  const float special[] = {-INFINITY, -100.0f, -87.5f, -87.0f, -86.9f, -20.5f, -1.0f, 0.0f, 0.5f, 1.0f, 10.0f, 50.0f, 88.0f, 88.5f, 88.8f, INFINITY, NAN};
  for (int64_t i = 0; i < in.numel(); ++i) in.data()[i] = -90.0f + 180.0f * static_cast<float>(i) / static_cast<float>(in.numel());
  for (size_t i = 0; i < std::size(special); ++i) {
    in.data()[i] = special[i];
    in.data()[in.numel() - 1 - static_cast<int64_t>(i)] = special[i];  // in the tail too
  }
  const void* ins[] = {in.data()};
  float* outs[] = {out.data()};
  ThreadPool pool(1);
  cg.run(ins, outs, pool);
  for (int64_t i = 0; i < in.numel(); ++i) {
    const float v = in.data()[i], y = out.data()[i];
    if (std::isnan(v)) EXPECT_TRUE(std::isnan(y)) << v;
    else if (v < -86.98868f) EXPECT_EQ(y, 0.0f) << v;
    else if (v > 88.72283f) EXPECT_EQ(y, INFINITY) << v;
    else EXPECT_NEAR(y, std::exp(static_cast<double>(v)), 2.4e-7 * std::exp(static_cast<double>(v))) << v;
  }
}

TEST(CompileModel, ShippedModelMatchesEagerAndEveryProbe) {
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  expect_model_matches(model, 2, 16, 7);
  // every grammar probe, padded into one batch (causal: positions past a prompt's end do not
  // change its last position's logits), against eager on the same batch
  const Tokenizer tok(f.vocab);
  const testcompile::ProbeBatch pb = testcompile::probe_batch(kProbes, tok);
  const std::vector<std::vector<int32_t>>& prompts = pb.prompts;
  const std::vector<int32_t>& ids = pb.ids;
  const int64_t B = pb.B, T = pb.T, V = f.config.vocab_size;
  ThreadPool pool(2);
  Tensor el, ep, cl, cp;
  model.forward(ids.data(), B, T, el, ep, pool);
  CompiledModel cm(model, test_options());
  cm.forward(ids.data(), B, T, cl, cp, pool);
  const float dl = max_abs_diff(el.data(), cl.data(), el.numel());
  EXPECT_LT(dl, 1e-5f);
  std::printf("every probe (B=%lld, T=%lld): max |logits diff| %.3g\n", static_cast<long long>(B), static_cast<long long>(T), dl);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t = static_cast<int64_t>(prompts[static_cast<size_t>(b)].size()) - 1;
    const float* e = el.data() + (b * T + t) * V;
    const float* c = cl.data() + (b * T + t) * V;
    EXPECT_EQ(std::max_element(e, e + V) - e, std::max_element(c, c + V) - c) << pb.probes[static_cast<size_t>(b)].prompt;
  }
}

TEST(CompileModel, RandomWeightsMatchEager) {
  ModelConfig c;
  c.vocab_size = 97;  // not a multiple of the vector width: the tails run
  c.block_size = 24;
  const GrammarMiniGPT model(c, random_weights(c, 3));
  expect_model_matches(model, 3, 21, 11);  // T past one 16-key block: the online softmax rescales
}

TEST(CompileModel, GeneratedGemmAndOtherVectorWidthsMatchEager) {
  // what max-autotune chooses between: the generated fixed-shape GEMMs, 8 and 32 lanes
  ModelConfig c;
  c.vocab_size = 97;
  c.block_size = 24;
  const GrammarMiniGPT model(c, random_weights(c, 4));
  for (const auto& [w, gen] : {std::pair{16, true}, std::pair{8, false}, std::pair{32, true}}) {
    CompileOptions o = test_options();
    o.codegen.vec_width = w;
    o.codegen.gemm = gen ? GemmBackend::kGenerated : GemmBackend::kEngine;
    expect_model_matches(model, 2, 19, 13, o);
  }
}

// Feeds tokens to eager and compiled decoders alike up to the model's whole context (t = 0 ..
// block_size - 1): every step's logits agree, and the compiled one compiled one graph in all.
void expect_decode_matches(const GrammarMiniGPT& model, CompileOptions opt) {
  const int64_t cap = model.config().block_size;
  Decoder eager(model);
  CompiledDecoder compiled(model, std::move(opt));
  ThreadPool pool(1);
  for (int64_t t = 0; t < cap; ++t) {
    const int32_t id = static_cast<int32_t>((t * 37 + 1) % model.config().vocab_size);
    const std::span<const float> e = eager.step(id, pool);
    const std::span<const float> c = compiled.step(id, pool);
    ASSERT_EQ(e.size(), c.size());
    ASSERT_LT(max_abs_diff(e.data(), c.data(), static_cast<int64_t>(e.size())), 1e-5f) << "position " << t;
  }
  EXPECT_EQ(compiled.compiles(), 1) << "one decode graph serves every position";
  EXPECT_THROW(compiled.step(1, pool), Error);  // the context is full
  compiled.reset();                              // and a second sequence reuses the graph
  EXPECT_EQ(compiled.step(1, pool).size(), static_cast<size_t>(model.config().vocab_size));
  EXPECT_EQ(compiled.compiles(), 1);
}

TEST(CompileModel, DecodeStepEqualsEagerDecodeStepAtEveryPosition) {
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  expect_decode_matches(model, test_options());
}

TEST(CompileModel, DecodeStepWithVectorAttentionAndRandomWeights) {
  ModelConfig c;  // dh = 8 != the 16 lanes: the decode attention takes the vector loops
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 32;
  c.vocab_size = 50;
  c.block_size = 21;
  const GrammarMiniGPT model(c, random_weights(c, 9));
  expect_decode_matches(model, test_options());
}

TEST(CompileModel, DecodeGraphGuardsItsRuntimePosition) {
  ModelConfig c;
  c.n_layer = 1;
  c.vocab_size = 40;
  c.block_size = 8;
  const GrammarMiniGPT model(c, random_weights(c, 6));
  WeightBinding w = bind_weights(model.weights());
  CompiledGraph g(capture_gpt_decode(c), w, test_options());
  Tensor k = Tensor::zeros({8, c.d_model}), v = Tensor::zeros({8, c.d_model}), logits = Tensor::empty({1, 1, 40});
  const int32_t id = 3;
  float* out[] = {logits.data()};
  ThreadPool pool(1);
  for (int32_t t : {0, 7}) {
    const void* in[] = {&id, &t, k.data(), v.data()};
    EXPECT_NO_THROW(g.run(in, out, pool)) << t;
  }
  for (int32_t t : {8, -1, 1000}) {  // at or past the caches' 8 rows: caught before the call
    const void* in[] = {&id, &t, k.data(), v.data()};
    try {
      g.run(in, out, pool);
      ADD_FAILURE() << "position " << t << " ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside the compiled capacity [0, 8)"), std::string::npos) << e.what();
    }
  }
}

TEST(CompileModel, ShapeGuardCompilesAnewForAnotherShape) {
  ModelConfig c;
  c.n_layer = 1;
  c.vocab_size = 40;
  c.block_size = 8;
  const GrammarMiniGPT model(c, random_weights(c, 5));
  CompiledModel cm(model, test_options());
  ThreadPool pool(1);
  std::vector<int32_t> ids(16, 3);
  Tensor l, p, el, ep;
  cm.forward(ids.data(), 2, 8, l, p, pool);
  EXPECT_EQ(cm.compiles(), 1);
  cm.forward(ids.data(), 2, 8, l, p, pool);
  EXPECT_EQ(cm.compiles(), 1);  // guard holds: no recompile
  cm.forward(ids.data(), 1, 5, l, p, pool);
  EXPECT_EQ(cm.compiles(), 2);  // guard failed: compiled for (1, 5)
  EXPECT_EQ(l.shape(), (Shape{1, 5, 40}));
  model.forward(ids.data(), 1, 5, el, ep, pool);
  EXPECT_LT(max_abs_diff(el.data(), l.data(), el.numel()), 1e-5f);
  std::vector<int32_t> bad(5, 40);
  EXPECT_THROW(cm.forward(bad.data(), 1, 5, l, p, pool), Error);
}

TEST(CompileModel, DebugFilesAreWritten) {
  // one folder per ISA: ctest runs this test under each ISA (MINIGPT_ISA), maybe at once
  const std::filesystem::path dir = std::filesystem::path(MINIGPT_BINARY_DIR) / (std::string("compile_test_dump_") + isa_name(active_isa()));
  std::filesystem::remove_all(dir);
  CompileOptions o = test_options();
  o.dump_dir = dir;
  const TinyHead head = TinyHead::init(1);
  WeightBinding w = bind_tinyhead(head);
  CompiledGraph cg(capture_tinyhead(2), w, o);
  const std::string gemm = gemm_generated_by_rule(2, gemm_isa(active_isa())) ? "kernels/cpp_gemm_0.cpp" : "kernels/extern_linear_0.cpp";
  for (const std::string f : {"ir_pre_fusion.txt", "ir_post_fusion.txt", "schedule.txt", "output_code.cpp",
                              "kernels/cpp_fused_softmax_1.cpp", gemm.c_str()})
    EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
}
