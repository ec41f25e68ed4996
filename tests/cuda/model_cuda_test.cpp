// CudaGPT and CudaDecoder (model/cuda/cuda_gpt.h) against the CPU engine (GrammarMiniGPT,
// Decoder): logits within 1e-5 on each path (the megakernel at every cluster size, whole-layer
// kernels, a kernel per op, cuBLAS;
// measured ~5e-6 on the H200: the sums over k run in another order than the CPU's; the
// megakernel: the shipped model 6.7e-6 forward (fc2 by k), 4.8e-6 decode; its decode step within 1e-6
// of the forward's row (measured 1.8e-7 to 3e-7: k split over lanes), bitwise equal with
// MINIGPT_MEGA_SPLITK=0), the same top-1 token for "Yesterday I"
// and for every grammar probe of tests/probes/grammar_probes.tsv with the shipped model,
// decode == full forward at every position, graph replays reproducible, bad input a clear
// Error; the forward split by rows (gpt_mega_rows.h, the default where it takes the shape) at
// every rows per CTA, bitwise the same across them. Tests skip without a GPU; the "no GPU / no
// CUDA" error runs everywhere.
#include "core/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "data/probes.h"
#include "data/tokenizer.h"
#include "expect_error.h"
#include "kernels/cuda/gpt_mega_rows.h"
#include "model/cuda/cuda_gpt.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "model/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace minigpt;
using namespace minigpt::cudatest;

constexpr double kLogitTol = 1e-5;
// The forward split by rows (gpt_mega_rows.h) sums proj by heads (each head's 16 k in order, then
// the heads in head order), not over all 64 k in order as the CPU engine: another reduction
// order, for which issue 14 allows 1e-4, stated. Measured on the H200 (gpu_check_606c2d9):
// 7.15e-6 on the probes, 9.54e-6 at the bench's ids, 1.19e-5 at (3, 12) with seed 60 (~6 ulps of
// a logit near 10). The probes, fixed data, stay held to kLogitTol.
constexpr double kReorderedLogitTol = 1e-4;
const std::string kShipped = std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors";

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 64;
  c.block_size = 24;
  c.vocab_size = 50;
  return c;
}

std::vector<int32_t> random_ids(int64_t n, int32_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  return ids;
}

int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

void expect_forward_matches(const GrammarMiniGPT& cpu_model, CudaGPT& gpu, int64_t B, int64_t T,
                            uint32_t seed, double tol = kLogitTol) {
  ThreadPool pool(1);
  const auto ids = random_ids(B * T, cpu_model.config().vocab_size, seed);
  Tensor logits, probs, glogits, gprobs;
  cpu_model.forward(ids.data(), B, T, logits, probs, pool);
  gpu.forward(ids.data(), B, T, glogits, gprobs);
  ASSERT_EQ(glogits.shape(), logits.shape());
  const size_t n = static_cast<size_t>(logits.numel());
  EXPECT_LE(max_abs_diff(glogits.data(), logits.data(), n), tol) << "logits B=" << B << " T=" << T;
  EXPECT_LE(max_abs_diff(gprobs.data(), probs.data(), n), tol) << "probs B=" << B << " T=" << T;
}

TEST(CudaModel, WithoutAGpuOrCudaTheErrorSaysSo) {
  if (cuda_model_available()) GTEST_SKIP() << "a CUDA GPU is visible: nothing to check";
  GrammarMiniGPT model(small_config(), ModelWeights::init_random(small_config(), 1));
  EXPECT_ERROR(CudaGPT{model}, "cannot run the model on CUDA");
}

constexpr CudaGPTOptions::Path kPaths[] = {CudaGPTOptions::Path::Mega, CudaGPTOptions::Path::Fused,
                                           CudaGPTOptions::Path::PerOp, CudaGPTOptions::Path::Cublas};

TEST(CudaModel, ForwardMatchesTheCpuOnEveryPath) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 7));
  for (auto path : kPaths) {
    SCOPED_TRACE(path_name(path));
    CudaGPT gpu(model, {.path = path});
    EXPECT_EQ(gpu.path(), path) << "the small config fits every path";
    uint32_t seed = 1;
    for (auto [B, T] : {std::pair<int64_t, int64_t>{2, 16}, {1, 1}, {3, 24}, {5, 7}, {2, 16}})
      expect_forward_matches(model, gpu, B, T, seed++);
    Tensor l, p;
    gpu.forward(nullptr, 0, 5, l, p);  // B == 0: empty outputs
    EXPECT_EQ(l.shape(), (Shape{0, 5, c.vocab_size}));
  }
}

TEST(CudaModel, GraphReplaysAreReproducibleAndOutputsFullyWritten) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 8));
  CudaGPT gpu(model);
  const int64_t B = 2, T = 16, n = B * T * c.vocab_size;
  const auto dev = gpu.prepare(B, T);
  const auto ids = random_ids(B * T, c.vocab_size, 3);
  MINIGPT_CUDA_CHECK(cudaMemcpy(dev.ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> first(n), again(n);
  MINIGPT_CUDA_CHECK(cudaMemset(dev.logits, 0xFF, n * 4));  // NaN: every element must be rewritten
  MINIGPT_CUDA_CHECK(cudaMemset(dev.probs, 0xFF, n * 4));
  gpu.replay(B, T);
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream()));
  MINIGPT_CUDA_CHECK(cudaMemcpy(first.data(), dev.probs, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 20; ++i) gpu.replay(B, T);
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream()));
  MINIGPT_CUDA_CHECK(cudaMemcpy(again.data(), dev.probs, n * 4, cudaMemcpyDeviceToHost));
  for (float v : first) ASSERT_FALSE(std::isnan(v));
  EXPECT_EQ(first, again) << "a replay must give bitwise the same result";
}

TEST(CudaModel, DecodeMatchesTheFullForwardAndTheCpuDecoder) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 9));
  ThreadPool pool(1);
  for (auto path : kPaths) {
    SCOPED_TRACE(path_name(path));
    CudaGPT gpu(model, {.path = path});
    CudaDecoder dec(gpu);
    EXPECT_EQ(dec.path(), path) << "the small config's decode step fits every path";
    Decoder cpu_dec(model);
    const int64_t T = c.block_size;
    const auto ids = random_ids(T, c.vocab_size, 5);
    Tensor logits, probs;
    gpu.forward(ids.data(), 1, T, logits, probs);
    for (int64_t t = 0; t < T; ++t) {
      const auto g = dec.step(ids[static_cast<size_t>(t)]);
      const auto cpu = cpu_dec.step(ids[static_cast<size_t>(t)], pool);
      ASSERT_LE(max_abs_diff(g.data(), logits.data() + t * c.vocab_size, g.size()), kLogitTol) << "position " << t;
      ASSERT_LE(max_abs_diff(g.data(), cpu.data(), g.size()), kLogitTol) << "position " << t;
    }
    EXPECT_ERROR(dec.step(0), "the context is full");
    dec.reset();
    EXPECT_ERROR(dec.step(c.vocab_size), "outside the vocabulary");
    EXPECT_EQ(dec.position(), 0);
    const auto last = dec.prefill(std::span<const int32_t>(ids.data(), 5));
    EXPECT_LE(max_abs_diff(last.data(), logits.data() + 4 * c.vocab_size, last.size()), kLogitTol);
    EXPECT_ERROR(dec.prefill(std::span<const int32_t>(ids.data(), ids.size())), "does not fit");
  }
}

// The megakernel at every cluster size the device runs, with proj by columns and by heads: the
// forward (shapes it takes and one it hands to the whole-layer kernels) and the decode step
// against the CPU; for each proj, bitwise the same logits at every cluster size (the split
// changes who computes a value, not how).
TEST(CudaModel, MegakernelEveryClusterSizeMatchesTheCpu) {
  REQUIRE_GPU();
  using Proj = CudaGPTOptions::MegaProj;
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 11));
  ThreadPool pool(1);
  const int64_t B = 2, T = 16;
  const auto ids = random_ids(B * T, c.vocab_size, 12);
  Tensor ref_logits, ref_probs;
  model.forward(ids.data(), B, T, ref_logits, ref_probs, pool);
  std::vector<int32_t> ctx;
  for (int64_t t = 0; t < c.block_size; ++t) ctx.push_back(ids[static_cast<size_t>(t % T)]);
  int forwards = 0, decodes = 0;
  for (Proj proj : {Proj::Columns, Proj::Heads}) {
    const bool heads = proj == Proj::Heads;
    std::vector<float> first;
    for (int R : {1, 2, 4, 8, 16}) {
      CudaGPT gpu(model, {.path = CudaGPTOptions::Path::Mega, .mega_cluster = R, .mega_proj = proj});
      const bool forward = gpu.mega_cluster_for(B, T) == R;  // else: not resident, or too little shared memory
      CudaDecoder dec(gpu);
      const bool decode = dec.mega_cluster() == R;
      if (!forward && !decode) continue;
      SCOPED_TRACE(std::string(heads ? "proj by heads" : "proj by columns") + ", cluster " + std::to_string(R));
      if (forward) {
        ++forwards;
        EXPECT_EQ(gpu.path_for(B, T), CudaGPTOptions::Path::Mega);
        EXPECT_EQ(gpu.mega_head_proj_for(B, T), heads);
        Tensor logits, probs;
        gpu.forward(ids.data(), B, T, logits, probs);
        const size_t n = static_cast<size_t>(logits.numel());
        EXPECT_LE(max_abs_diff(logits.data(), ref_logits.data(), n), kLogitTol);
        EXPECT_LE(max_abs_diff(probs.data(), ref_probs.data(), n), kLogitTol);
        if (first.empty()) first.assign(logits.data(), logits.data() + n);
        else EXPECT_EQ(std::vector<float>(logits.data(), logits.data() + n), first) << "differs from the first cluster size";
      }
      if (decode) {
        ++decodes;
        EXPECT_EQ(dec.mega_head_proj(), heads);
        Decoder cpu_dec(model);
        Tensor full, full_probs;  // the same context as one forward
        gpu.forward(ctx.data(), 1, c.block_size, full, full_probs);
        double vs_forward = 0.0;
        for (int64_t t = 0; t < c.block_size; ++t) {
          const auto g = dec.step(ctx[static_cast<size_t>(t)]);
          const auto cpu = cpu_dec.step(ctx[static_cast<size_t>(t)], pool);
          ASSERT_LE(max_abs_diff(g.data(), cpu.data(), g.size()), kLogitTol) << "decode position " << t;
          vs_forward = std::max(vs_forward, max_abs_diff(g.data(), full.data() + t * c.vocab_size, g.size()));
        }
        EXPECT_LE(vs_forward, 1e-6);  // k split over lanes in the decode step (measured <= 3e-7)
        std::printf("megakernel %s cluster %d: decode vs the forward (1, %d) on %s%s: max |diff| %.3g\n",
                    heads ? "proj by heads" : "proj by columns", R, c.block_size,
                    path_name(gpu.path_for(1, c.block_size)), gpu.mega_head_proj_for(1, c.block_size) ? " by heads" : "",
                    vs_forward);
      }
    }
  }
  EXPECT_GE(forwards, 2) << "the megakernel's forward ran at too few cluster sizes";
  EXPECT_GE(decodes, 2) << "the megakernel's decode step ran at too few cluster sizes";
  std::printf("megakernel: %d forwards and %d decoders checked\n", forwards, decodes);
  // a shape too large for its shared memory runs the whole-layer kernels, still right (the
  // weight-split plan: by default the forward split by rows takes the shape)
  CudaGPT gpu(model, {.mega_rows = 0});
  EXPECT_EQ(gpu.path_for(5, 24), CudaGPTOptions::Path::Fused);
  expect_forward_matches(model, gpu, 5, 24, 13);
  CudaGPT by_rows(model);
  EXPECT_EQ(by_rows.mega_rows_for(5, 24), 2);
  expect_forward_matches(model, by_rows, 5, 24, 13, kReorderedLogitTol);
}

// The decode step's variants (cuda_gpt.cpp): MINIGPT_MEGA_STATE = params | mapped do the same
// arithmetic: bitwise the same logits over a whole context, twice (after reset() positions
// repeat: stale state would show), with a
// replay() between steps changing nothing. MINIGPT_MEGA_SPLITK=0 (sums in k order) gives the
// forward's row bitwise; the default k-split within 1e-6 of it. All within 1e-5 of the CPU.
TEST(CudaModel, MegakernelDecodeVariantsAgree) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 21));
  ThreadPool pool(1);
  const auto ctx = random_ids(c.block_size, c.vocab_size, 22);
  Decoder cpu_dec(model);
  std::vector<float> cpu;
  for (int32_t id : ctx) {
    const auto l = cpu_dec.step(id, pool);
    cpu.insert(cpu.end(), l.begin(), l.end());
  }
  CudaGPT gpu(model, {.mega_proj = CudaGPTOptions::MegaProj::Heads});  // the forward's proj as the decoder's
  Tensor full, full_probs;  // the context as one forward: its rows are the steps' logits
  gpu.forward(ctx.data(), 1, c.block_size, full, full_probs);
  ASSERT_EQ(gpu.path_for(1, c.block_size), CudaGPTOptions::Path::Mega);
  const std::vector<float> rows(full.data(), full.data() + full.numel());
  for (const char* split : {"1", "0"}) {
    std::vector<float> first;
    for (const char* state : {"params", "mapped"}) {
      SCOPED_TRACE(std::string("split_k ") + split + ", state " + state);
      setenv("MINIGPT_MEGA_SPLITK", split, 1);
      setenv("MINIGPT_MEGA_STATE", state, 1);
      CudaDecoder dec(gpu);
      for (const char* name : {"MINIGPT_MEGA_SPLITK", "MINIGPT_MEGA_STATE"}) unsetenv(name);
      ASSERT_EQ(dec.path(), CudaGPTOptions::Path::Mega);
      for (int round = 0; round < 2; ++round) {
        dec.reset();
        std::vector<float> got;
        for (size_t t = 0; t < ctx.size(); ++t) {
          const auto g = dec.step(ctx[t]);
          got.insert(got.end(), g.begin(), g.end());
          if (t == 3) dec.replay();  // repeats position 3's step (the same cache row, the same values)
        }
        EXPECT_LE(max_abs_diff(got.data(), cpu.data(), got.size()), kLogitTol);
        const double vs_forward = max_abs_diff(got.data(), rows.data(), got.size());
        if (split[0] == '0') EXPECT_EQ(got, rows) << "k in order: not the forward's rows bitwise";
        else EXPECT_LE(vs_forward, 1e-6) << "k split: too far from the forward's rows";
        if (round == 0 && first.empty())
          std::printf("decode split_k %s vs the forward's rows: max |diff| %.3g\n", split, vs_forward);
        if (first.empty()) first = got;
        else EXPECT_EQ(got, first) << "round " << round;
      }
    }
  }
}

// The megakernel is specialised on the shipped dims (C 64, H 4, F 256); other dims run its
// generic kernel (here C 32, H 2): the forward and the decode step against the CPU.
TEST(CudaModel, MegakernelGenericDimsMatchTheCpu) {
  REQUIRE_GPU();
  ModelConfig c = small_config();
  c.d_model = 32;
  c.n_head = 2;
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 21));
  CudaGPT gpu(model, {.path = CudaGPTOptions::Path::Mega});
  ASSERT_GT(gpu.mega_cluster_for(2, 16), 0) << "the megakernel does not take (2, 16) at C 32";
  expect_forward_matches(model, gpu, 2, 16, 22);
  CudaDecoder dec(gpu);
  ASSERT_GT(dec.mega_cluster(), 0);
  Decoder cpu_dec(model);
  ThreadPool pool(1);
  const auto ids = random_ids(c.block_size, c.vocab_size, 23);
  for (int64_t t = 0; t < c.block_size; ++t) {
    const auto g = dec.step(ids[static_cast<size_t>(t)]);
    const auto cpu = cpu_dec.step(ids[static_cast<size_t>(t)], pool);
    ASSERT_LE(max_abs_diff(g.data(), cpu.data(), g.size()), kLogitTol) << "decode position " << t;
  }
}

// "Yesterday I" (first) and every grammar probe of tests/probes/grammar_probes.tsv, as ids.
std::vector<std::vector<int32_t>> probe_prompts(const Tokenizer& tok) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> yesterday = {Tokenizer::kBos};
  for (int32_t id : tok.encode("Yesterday I").ids) yesterday.push_back(id);
  prompts.push_back(yesterday);
  for (const auto& probe : data::load_probes(std::string(MINIGPT_SOURCE_DIR) + "/tests/probes/grammar_probes.tsv"))
    prompts.push_back(data::probe_input_ids(probe, tok));
  return prompts;
}

// One forward per prompt of probe_prompts on `gpu` and the CPU: the same top-1 at the last
// position (EXPECTed), the worst |logit or prob diff| returned; *by_rows counts the prompts the
// row-split forward ran at rp rows per CTA.
double worst_probe_diff(const GrammarMiniGPT& model, CudaGPT& gpu, const Tokenizer& tok, int rp, int* by_rows) {
  ThreadPool pool(1);
  const int64_t V = model.config().vocab_size;
  double worst = 0.0;
  for (const auto& ids : probe_prompts(tok)) {
    const int64_t T = static_cast<int64_t>(ids.size());
    *by_rows += gpu.mega_rows_for(1, T) == rp;
    Tensor logits, probs, glogits, gprobs;
    model.forward(ids.data(), 1, T, logits, probs, pool);
    gpu.forward(ids.data(), 1, T, glogits, gprobs);
    EXPECT_EQ(argmax(glogits.data() + (T - 1) * V, V), argmax(logits.data() + (T - 1) * V, V)) << "prompt of " << T;
    worst = std::max(worst, max_abs_diff(glogits.data(), logits.data(), static_cast<size_t>(logits.numel())));
    worst = std::max(worst, max_abs_diff(gprobs.data(), probs.data(), static_cast<size_t>(probs.numel())));
  }
  return worst;
}

// The forward split by rows (kernels/cuda/gpt_mega_rows.h) at 1, 2 and 4 rows per CTA, on the
// shipped model and on the small random one (the same architecture, V 50): logits and probs
// within kReorderedLogitTol of the CPU at (2, 16) and the other shapes it takes (the probes within
// 1e-5), bitwise the same for every rows per CTA (a row's arithmetic does not depend on which CTA
// runs it, and every bitwise MINIGPT_MEGA_ROWS_VARIANT of rp 1 keeps it), the same top-1 as the CPU on
// every probe; a T past 16 rows per CTA runs the weight-split plan instead.
TEST(CudaModel, MegakernelByRowsMatchesTheCpu) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(kShipped)) GTEST_SKIP() << "shipped model missing: " << kShipped;
  ModelFile file = load_model(kShipped);
  const Tokenizer tok(file.vocab);
  GrammarMiniGPT shipped(file.config, std::move(file.weights));
  const GrammarMiniGPT small(small_config(), ModelWeights::init_random(small_config(), 31));
  using Shape2 = std::pair<int64_t, int64_t>;
  for (const GrammarMiniGPT* model : {static_cast<const GrammarMiniGPT*>(&shipped), &small}) {
    const int64_t V = model->config().vocab_size;
    std::vector<std::vector<float>> first;  // per shape: rp = 1's logits and probs
    for (int rp : {1, 2, 4}) {
      SCOPED_TRACE("rows per CTA " + std::to_string(rp) + ", V " + std::to_string(V));
      CudaGPT gpu(*model, {.path = CudaGPTOptions::Path::Mega, .mega_rows = rp});
      size_t at = 0;
      uint32_t seed = 40;
      for (auto [B, T] : {Shape2{2, 16}, Shape2{1, 16}, Shape2{2, 8}, Shape2{4, 16}, Shape2{3, 5}, Shape2{1, 1}}) {
        ASSERT_EQ(gpu.mega_rows_for(B, T), rp) << "B=" << B << " T=" << T;
        EXPECT_EQ(gpu.mega_cluster_for(B, T), (T + rp - 1) / rp);
        EXPECT_EQ(gpu.path_for(B, T), CudaGPTOptions::Path::Mega);
        expect_forward_matches(*model, gpu, B, T, seed, kReorderedLogitTol);
        const auto ids = random_ids(B * T, static_cast<int32_t>(V), seed++);
        Tensor logits, probs;
        gpu.forward(ids.data(), B, T, logits, probs);
        for (const Tensor* out : {&logits, &probs}) {
          std::vector<float> v(out->data(), out->data() + out->numel());
          if (rp == 1) {
            first.push_back(v);
          } else if (cuda::kMegaRowsVariantBitwise[cuda::gpt_mega_rows_variant()]) {
            // (rp 1 runs the process's MINIGPT_MEGA_ROWS_VARIANT, the others kVar 0: bitwise the
            // same unless that variant is not the default's arithmetic)
            EXPECT_EQ(v, first[at]) << "not bitwise rp = 1's at B=" << B << " T=" << T;
          }
          ++at;
        }
      }
      // more than 32 keys (attention's scores through shared memory): the shipped model at T 40
      if (rp == 4 && model == &shipped) {
        ASSERT_EQ(gpu.mega_rows_for(1, 40), 4);
        expect_forward_matches(*model, gpu, 1, 40, 51, kReorderedLogitTol);
      }
      // past 16 rows per CTA (the small model's block is 24): the weight-split megakernel
      if (rp == 1) {
        EXPECT_EQ(gpu.mega_rows_for(1, 24), 0);
        EXPECT_GT(gpu.mega_cluster_for(1, 24), 0);
        expect_forward_matches(*model, gpu, 1, 24, 50);
      }
    }
  }
  // every grammar probe and "Yesterday I" on the shipped model, one forward per prompt
  CudaGPT gpu(shipped, {.path = CudaGPTOptions::Path::Mega, .mega_rows = 2});
  int by_rows = 0;
  const double worst = worst_probe_diff(shipped, gpu, tok, 2, &by_rows);
  EXPECT_LE(worst, kLogitTol);
  EXPECT_GT(by_rows, 0);
  std::printf("megakernel by rows (2 per CTA): %zu prompts (%d by rows), max |logit or prob diff| = %.3g\n",
              probe_prompts(tok).size(), by_rows, worst);
}

// The 1-row-per-CTA kernel's variants (MINIGPT_MEGA_ROWS_VARIANT, gpt_mega_rows.h): on the
// shipped model, the small one, an 8-layer one and two random ones of the shipped architecture
// with V 640 and V 513 (the head's second vocabulary columns: V 611 and 640 have warps with and
// without them and none partly covered at 640, 513 one column past 512, in warp 0 alone), logits
// and probs within kReorderedLogitTol of the CPU, logits and probs bitwise the first variant's
// (lm1, the default) where kMegaRowsVariantBitwise says so (all of them now: bitw; a variant with
// another summation order would be held to the CPU only); on the shipped model every grammar
// probe within kLogitTol of the CPU with the same top-1 (each variant's worst printed); an
// unknown name is a clear error naming every variant.
TEST(CudaModel, MegakernelByRowsVariantsMatchTheCpu) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(kShipped)) GTEST_SKIP() << "shipped model missing: " << kShipped;
  ModelFile file = load_model(kShipped);
  const Tokenizer tok(file.vocab);
  GrammarMiniGPT shipped(file.config, std::move(file.weights));
  const GrammarMiniGPT small(small_config(), ModelWeights::init_random(small_config(), 33));
  // 8 layers and the shipped vocabulary: the ring has 10 slots at T 16 (11 for the shipped
  // model, 12 for the small one) and lm_head's 10 pieces fill it, so the slot bookkeeping wraps
  // at other points of the stream than in the shipped model
  ModelConfig deep_config = file.config;
  deep_config.n_layer = 8;
  const GrammarMiniGPT deep(deep_config, ModelWeights::init_random(deep_config, 34));
  // V 640: lm_head's 10 pieces full, warps 0..3 all with a second column (n 512..639), 4..15
  // none; V 513: 9 pieces, the last of 1 row, only thread 0 with a second column (n 512)
  ModelConfig wide_config = file.config, odd_config = file.config;
  wide_config.vocab_size = 640;
  odd_config.vocab_size = 513;
  const GrammarMiniGPT wide(wide_config, ModelWeights::init_random(wide_config, 35));
  const GrammarMiniGPT odd(odd_config, ModelWeights::init_random(odd_config, 36));
  static_assert(cuda::kMegaRowsVariantBitwise[0], "the first variant (the default) is the others' reference");
  struct UnsetAfter {  // an ASSERT leaving the loop must not leave a variant to the other tests
    ~UnsetAfter() { unsetenv("MINIGPT_MEGA_ROWS_VARIANT"); }
  } unset_after;
  using Shape2 = std::pair<int64_t, int64_t>;
  const Shape2 shapes[] = {{2, 16}, {1, 16}, {3, 12}, {2, 10}, {2, 9}, {3, 5}, {1, 1}};
  for (const GrammarMiniGPT* model : {static_cast<const GrammarMiniGPT*>(&shipped), &small, &deep, &wide, &odd}) {
    const int64_t V = model->config().vocab_size;
    std::vector<std::vector<float>> first, first_probs;  // per shape: the first variant's outputs
    for (size_t vi = 0; vi < std::size(cuda::kMegaRowsVariants); ++vi) {
      const char* variant = cuda::kMegaRowsVariants[vi];
      SCOPED_TRACE(std::string("variant ") + variant + ", V " + std::to_string(V));
      setenv("MINIGPT_MEGA_ROWS_VARIANT", variant, 1);
      ASSERT_EQ(cuda::gpt_mega_rows_variant(), static_cast<int>(vi));  // the word is read, not ignored
      CudaGPT gpu(*model, {.path = CudaGPTOptions::Path::Mega, .mega_rows = 1});
      uint32_t seed = 60;
      size_t at = 0;
      for (auto [B, T] : shapes) {
        ASSERT_EQ(gpu.mega_rows_for(B, T), 1) << "B=" << B << " T=" << T;
        expect_forward_matches(*model, gpu, B, T, seed, kReorderedLogitTol);
        const auto ids = random_ids(B * T, static_cast<int32_t>(V), seed++);
        Tensor logits, probs;
        gpu.forward(ids.data(), B, T, logits, probs);
        std::vector<float> v(logits.data(), logits.data() + logits.numel());
        std::vector<float> p(probs.data(), probs.data() + probs.numel());
        if (vi == 0) {
          first.push_back(v);
          first_probs.push_back(p);
        } else if (cuda::kMegaRowsVariantBitwise[vi]) {
          EXPECT_EQ(v, first[at]) << "logits not bitwise the first variant's at B=" << B << " T=" << T;
          EXPECT_EQ(p, first_probs[at]) << "probs not bitwise the first variant's at B=" << B << " T=" << T;
        }
        ++at;
      }
      if (model != &shipped) continue;
      int by_rows = 0;
      const double worst = worst_probe_diff(shipped, gpu, tok, 1, &by_rows);
      EXPECT_LE(worst, kLogitTol);
      EXPECT_GT(by_rows, 0);
      std::printf("megakernel by rows, variant %s: the probes (%d by rows) max |logit or prob diff| vs CPU = %.3g\n",
                  variant, by_rows, worst);
    }
    unsetenv("MINIGPT_MEGA_ROWS_VARIANT");
  }
  setenv("MINIGPT_MEGA_ROWS_VARIANT", "nope", 1);
  const CudaGPTOptions by_rows{.path = CudaGPTOptions::Path::Mega, .mega_rows = 1};
  EXPECT_ERROR(CudaGPT(small, by_rows), "MINIGPT_MEGA_ROWS_VARIANT=nope");  // checked when built
  for (const char* variant : cuda::kMegaRowsVariants) EXPECT_ERROR(CudaGPT(small, by_rows), variant);  // each named
  unsetenv("MINIGPT_MEGA_ROWS_VARIANT");
}

// Options and shapes the row-split forward does not take are clear errors; the environment's
// choice and the automatic one.
TEST(CudaModel, MegakernelByRowsBadOptionsAreClearErrors) {
  // the launcher checks the shape before any CUDA call: C 32 is not the architecture it takes
  cuda::MegaParams bad;
  bad.dims = {.L = 4, .B = 1, .T = 16, .C = 32, .H = 2, .F = 128, .V = 50, .P = 24, .capacity = 16};
  EXPECT_ERROR(cuda::gpt_mega_rows(bad, 1, nullptr), "is not taken at 1 rows per CTA");
  // an unknown MINIGPT_MEGA_ROWS_VARIANT word: the message names it and every variant (the list
  // is built from kMegaRowsVariants; host code, no device needed)
  setenv("MINIGPT_MEGA_ROWS_VARIANT", "nope", 1);
  EXPECT_ERROR(cuda::gpt_mega_rows_variant(), "MINIGPT_MEGA_ROWS_VARIANT=nope");
  for (const char* variant : cuda::kMegaRowsVariants) EXPECT_ERROR(cuda::gpt_mega_rows_variant(), variant);
  unsetenv("MINIGPT_MEGA_ROWS_VARIANT");
  bad.dims.C = 64;
  bad.dims.H = 4;
  bad.dims.F = 256;
  EXPECT_ERROR(cuda::gpt_mega_rows(bad, 3, nullptr), "is not taken at 3 rows per CTA");
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 32));
  EXPECT_ERROR(CudaGPT(model, {.mega_rows = 3}), "rows per CTA must be 1, 2 or 4");
  setenv("MINIGPT_MEGA_ROWS", "5", 1);
  EXPECT_ERROR(CudaGPT{model}, "MINIGPT_MEGA_ROWS=5");
  setenv("MINIGPT_MEGA_ROWS", "2", 1);
  CudaGPT by_env(model);
  unsetenv("MINIGPT_MEGA_ROWS");
  EXPECT_EQ(by_env.mega_rows_for(1, 16), 2);
  expect_forward_matches(model, by_env, 1, 16, 34, kReorderedLogitTol);
  setenv("MINIGPT_MEGA_ROWS", "0", 1);
  CudaGPT off(model);
  unsetenv("MINIGPT_MEGA_ROWS");
  EXPECT_EQ(off.mega_rows_for(2, 16), 0);
  EXPECT_GT(off.mega_cluster_for(2, 16), 0);
  // automatic (the default): the fewest rows per CTA that take the shape
  CudaGPT automatic(model);
  EXPECT_EQ(automatic.mega_rows_for(2, 16), 1);
  EXPECT_EQ(automatic.mega_rows_for(1, 24), 2);
  EXPECT_EQ(CudaGPT(model, {.mega_proj = CudaGPTOptions::MegaProj::Columns}).mega_rows_for(2, 16), 0);
}

TEST(CudaModel, BadIdsAreClearErrors) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 10));
  CudaGPT gpu(model);
  Tensor l, p;
  std::vector<int32_t> ids = {1, 2, c.vocab_size};
  EXPECT_ERROR(gpu.forward(ids.data(), 1, 3, l, p), "is outside the vocabulary");
  EXPECT_ERROR(gpu.forward(ids.data(), 1, c.block_size + 1, l, p), "sequence length");
}

// The shipped model: every grammar probe and "Yesterday I" give the CPU's top-1 token, and the
// logits agree to 1e-5 (the probes run as one forward per prompt, as eval-probes does).
TEST(CudaModel, ShippedModelSameTop1AsTheCpuOnEveryProbe) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(kShipped)) GTEST_SKIP() << "shipped model missing: " << kShipped;
  ModelFile file = load_model(kShipped);
  const Tokenizer tok(file.vocab);
  GrammarMiniGPT model(file.config, std::move(file.weights));
  CudaGPT gpu(model);
  ThreadPool pool(1);
  const int64_t V = model.config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = probe_prompts(tok);
  const std::vector<int32_t>& yesterday = prompts.front();
  ASSERT_GT(prompts.size(), 10u);
  double worst = 0.0;
  for (const auto& ids : prompts) {
    const int64_t T = static_cast<int64_t>(ids.size());
    Tensor logits, probs, glogits, gprobs;
    model.forward(ids.data(), 1, T, logits, probs, pool);
    gpu.forward(ids.data(), 1, T, glogits, gprobs);
    const float* last = logits.data() + (T - 1) * V;
    const float* glast = glogits.data() + (T - 1) * V;
    ASSERT_EQ(argmax(glast, V), argmax(last, V)) << "prompt of " << T << " tokens";
    worst = std::max(worst, max_abs_diff(glogits.data(), logits.data(), static_cast<size_t>(logits.numel())));
  }
  EXPECT_LE(worst, kLogitTol);
  std::printf("shipped model (%s, cluster %d at B=1 T=%d): %zu prompts, same top-1, max |logit diff| = %.3g\n",
              path_name(gpu.path_for(1, 8)), gpu.mega_cluster_for(1, 8), 8, prompts.size(), worst);
  // the decode step (the megakernel's on an H200) against the CPU decoder over a whole context
  CudaDecoder dec(gpu);
  Decoder cpu_dec(model);
  double dworst = 0.0;
  for (int64_t t = 0; t < model.config().block_size; ++t) {
    const int32_t id = yesterday[static_cast<size_t>(t) % yesterday.size()];
    const auto g = dec.step(id);
    const auto cpu = cpu_dec.step(id, pool);
    ASSERT_EQ(argmax(g.data(), V), argmax(cpu.data(), V)) << "decode position " << t;
    dworst = std::max(dworst, max_abs_diff(g.data(), cpu.data(), g.size()));
  }
  EXPECT_LE(dworst, kLogitTol);
  std::printf("shipped model decode (%s, cluster %d): %lld positions, same top-1, max |logit diff| = %.3g\n",
              path_name(dec.path()), dec.mega_cluster(), static_cast<long long>(model.config().block_size), dworst);
}

// ---- CudaDecoder::generate: the device decode loop (gpt_mega_generate) against the CPU ----

// `minigpt generate`'s loop on the CPU engine over `dec` (from its position): the tokens, every
// fed token's logits from the prompt's last on, and why it stopped.
struct CpuGenerated {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  CudaDecoder::Generated::Stop stop = CudaDecoder::Generated::Stop::Count;
};
CpuGenerated cpu_generate(Decoder& dec, std::span<const int32_t> prompt, int n, const SamplingParams& params,
                          uint64_t seed, int32_t eos) {
  ThreadPool pool(1);
  CpuGenerated r;
  std::span<const float> logits = dec.prefill(prompt, pool);
  r.logits.assign(logits.begin(), logits.end());
  Sampler sampler(seed);
  for (int i = 0; i < n; ++i) {
    const int32_t id = sampler.sample(logits, params);
    if (id == eos) {
      r.stop = CudaDecoder::Generated::Stop::Eos;
      break;
    }
    r.tokens.push_back(id);
    if (dec.position() == dec.capacity()) {
      r.stop = CudaDecoder::Generated::Stop::ContextFull;
      break;
    }
    logits = dec.step(id, pool);
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  }
  return r;
}

// Sets an environment variable for a scope (MINIGPT_MEGA_GENERATE=0: the host loop).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

// generate() on the GPU (the device loop where it takes the settings, else the host loop) gives
// the CPU loop's tokens, stop and position for greedy and sampled settings (temperature, top-k
// 1..64, and top-k 0: the host loop), its logits within the decode bound of the CPU's, the same
// logits as the GPU's host loop over step() (the same kernels' arithmetic), and leaves a cache
// that step() continues from.
void expect_generate_matches(const GrammarMiniGPT& model, const std::vector<std::vector<int32_t>>& prompts, int n,
                             int32_t eos, const char* what) {
  SCOPED_TRACE(what);
  CudaGPT gpu(model);
  CudaDecoder dec(gpu);
  ThreadPool pool(1);
  const SamplingParams settings[] = {{0.0f, 0}, {0.8f, 40}, {1.0f, 5}, {1.3f, 64}, {1.0f, 1}, {0.8f, 0}};
  int on_device = 0, runs = 0;
  double worst_cpu = 0.0, worst_host = 0.0;
  for (const auto& prompt : prompts) {
    for (const SamplingParams& params : settings) {
      for (uint64_t seed : {1u, 7u}) {
        SCOPED_TRACE(::testing::Message() << "prompt of " << prompt.size() << ", temperature " << params.temperature
                                          << ", top-k " << params.top_k << ", seed " << seed);
        Decoder cpu_dec(model);
        const CpuGenerated cpu = cpu_generate(cpu_dec, prompt, n, params, seed, eos);
        dec.reset();
        std::vector<float> logits;
        const CudaDecoder::Generated g = dec.generate(prompt, n, params, seed, eos, &logits);
        ++runs;
        on_device += g.on_device;
        EXPECT_EQ(g.on_device, dec.device_loop(params));
        ASSERT_EQ(g.tokens, cpu.tokens);
        EXPECT_EQ(g.stop, cpu.stop);
        EXPECT_EQ(dec.position(), cpu_dec.position());
        ASSERT_EQ(logits.size(), cpu.logits.size());
        worst_cpu = std::max(worst_cpu, max_abs_diff(logits.data(), cpu.logits.data(), logits.size()));
        {  // the GPU's host loop over step()
          const ScopedEnv host_loop("MINIGPT_MEGA_GENERATE", "0");
          dec.reset();
          std::vector<float> host_logits;
          const CudaDecoder::Generated h = dec.generate(prompt, n, params, seed, eos, &host_logits);
          EXPECT_FALSE(h.on_device);
          ASSERT_EQ(h.tokens, g.tokens);
          ASSERT_EQ(host_logits.size(), logits.size());
          worst_host = std::max(worst_host, max_abs_diff(logits.data(), host_logits.data(), logits.size()));
        }
        if (g.on_device && dec.position() < dec.capacity()) {  // step() continues from the loop's cache
          dec.reset();
          dec.generate(prompt, n, params, seed, eos);
          const auto next = dec.step(0);
          const auto cpu_next = cpu_dec.step(0, pool);
          EXPECT_LE(max_abs_diff(next.data(), cpu_next.data(), next.size()), kLogitTol);
        }
      }
    }
  }
  EXPECT_LE(worst_cpu, kLogitTol);
  EXPECT_LE(worst_host, 1e-6);
  std::printf("generate (%s, cluster %d): %d of %d runs on the device loop, same tokens as the CPU; max |logit diff| "
              "%.3g from the CPU, %.3g from the host loop over step()\n",
              what, dec.mega_cluster(), on_device, runs, worst_cpu, worst_host);
  if (dec.path() == CudaGPTOptions::Path::Mega) {
    EXPECT_GT(on_device, 0) << "the device loop never ran";
  }
}

TEST(CudaModel, GenerateOnTheDeviceMatchesTheCpuLoop) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();  // vocabulary 50: the last CTAs of 8 hold no columns
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 21));
  // no stop token: every run to n tokens or to a full context (n 1000)
  expect_generate_matches(model, {{3}, {5, 9, 11, 2}}, 10, -1, "random small model, n 10");
  expect_generate_matches(model, {{3}, random_ids(20, c.vocab_size, 4)}, 1000, -1, "random small model, to a full context");
  expect_generate_matches(model, {{3, 4}}, 0, -1, "random small model, n 0");
  if (!std::filesystem::exists(kShipped)) GTEST_SKIP() << "shipped model missing: " << kShipped;
  ModelFile file = load_model(kShipped);
  const Tokenizer tok(file.vocab);
  GrammarMiniGPT shipped(file.config, std::move(file.weights));
  std::vector<std::vector<int32_t>> prompts = {{Tokenizer::kBos}};
  for (const char* text : {"Yesterday I", "the little dog"}) {
    std::vector<int32_t> ids = {Tokenizer::kBos};
    for (int32_t id : tok.encode(text).ids) ids.push_back(id);
    prompts.push_back(ids);
  }
  expect_generate_matches(shipped, prompts, 40, Tokenizer::kEos, "shipped model, stop at <eos>");
}

TEST(CudaModel, GenerateBadInputIsAClearError) {
  REQUIRE_GPU();
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 22));
  CudaGPT gpu(model);
  CudaDecoder dec(gpu);
  const SamplingParams greedy{0.0f, 0};
  const std::vector<int32_t> too_long(static_cast<size_t>(c.block_size) + 1, 3);
  EXPECT_ERROR(dec.generate(too_long, 4, greedy, 1, -1), "does not fit");
  EXPECT_ERROR(dec.generate(std::vector<int32_t>{1, c.vocab_size}, 4, greedy, 1, -1), "outside the vocabulary");
  EXPECT_ERROR(dec.generate(std::vector<int32_t>{}, 4, greedy, 1, -1), "at least one prompt token");
  EXPECT_ERROR(dec.generate(std::vector<int32_t>{1}, -1, greedy, 1, -1), "must be >= 0");
  EXPECT_ERROR(dec.generate(std::vector<int32_t>{1}, 4, SamplingParams{-1.0f, 0}, 1, -1), "temperature");
  EXPECT_EQ(dec.position(), 0) << "nothing fed on error";
  // a full context: the prompt fills it, one token is chosen, and the stop says why
  const std::vector<int32_t> full(static_cast<size_t>(c.block_size), 3);
  const CudaDecoder::Generated g = dec.generate(full, 4, greedy, 1, -1);
  EXPECT_EQ(g.tokens.size(), 1u);
  EXPECT_EQ(g.stop, CudaDecoder::Generated::Stop::ContextFull);
  EXPECT_ERROR(dec.generate(std::vector<int32_t>{1}, 4, greedy, 1, -1), "does not fit");
}

}  // namespace
