// The compiled CUDA path end to end on a GPU (each test skips visibly without one): generated
// CUDA against the CPU engine and the CPU compiled path: TinyHead below 1e-6, the whole model's
// logits within 1e-5 and the same top-1 on every grammar probe (shipped model; random weights),
// generated GEMMs as cuBLAS, the decode step against the eager decoder, the softmax edge rows,
// the shape guard, the warm cache, and every output element written (outputs poisoned first).
#include "compile/capture.h"
#include "compile/codegen_cuda_rows.h"
#include "compile/cuda/runner_cuda.h"
#include "compile/runner.h"
#include "compile_test_config.h"
#include "core/error.h"
#include "data/probes.h"
#include "data/tokenizer.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include "compile_model_test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <span>

using namespace minigpt;
using namespace minigpt::compile;
using testcompile::max_abs_diff;
using testcompile::random_weights;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_gpu_visible()) GTEST_SKIP() << "no CUDA GPU visible"

const std::string kModel = std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors";
const std::string kProbes = std::string(MINIGPT_SOURCE_DIR) + "/tests/probes/grammar_probes.tsv";

// prologue: 0 none, 1 the layernorms' (the default), 2 the layernorms' and the attentions', 3 the
// layernorms', each prefill attention the first stage of its MLP kernel (fuse_mlp_attention)
CudaCompileOptions cuda_options(bool generated_gemm = false, bool pdl = false, bool megakernel = false, int prologue = 1) {
  CudaCompileOptions o;
  o.codegen.matmul_prologue = prologue >= 1;
  o.codegen.attention_prologue = prologue == 2;
  o.codegen.fuse_mlp_attention = prologue == 3;
  o.cache_dir = std::filesystem::path(MINIGPT_BINARY_DIR) / "compile_cuda_test_cache";
  o.quiet = true;
  o.codegen.generated_gemm = generated_gemm || megakernel;
  o.codegen.pdl = pdl;
  o.codegen.megakernel = megakernel;
  return o;
}

bool hopper_or_later() {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  return major >= 9;
}

CompileOptions cpu_options() {
  CompileOptions o;
  o.cache_dir = std::filesystem::path(MINIGPT_BINARY_DIR) / "compile_test_cache";
  o.quiet = true;
  return o;
}



int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

// GPU compiled (options o, `what` names them) vs CPU eager (and vs CPU compiled) on random ids;
// returns the logits difference. tol: the logits' bound (and the probs', above 1e-5).
float expect_options_match(const GrammarMiniGPT& model, int64_t B, int64_t T, uint64_t seed, const CudaCompileOptions& o,
                           const std::string& what, float tol = 1e-5f) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (int32_t& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(model.config().vocab_size));
  ThreadPool pool(2);
  Tensor el, ep, cl, cp, gl = Tensor::full({B, T, model.config().vocab_size}, NAN), gp = Tensor::full({B, T, model.config().vocab_size}, NAN);
  model.forward(ids.data(), B, T, el, ep, pool);
  CompiledModel cpu(model, cpu_options());
  cpu.forward(ids.data(), B, T, cl, cp, pool);
  CudaCompiledModel gpu(model, o);
  gpu.forward(ids.data(), B, T, gl, gp);
  const float dl = max_abs_diff(el.data(), gl.data(), el.numel());
  const float dp = max_abs_diff(ep.data(), gp.data(), ep.numel());
  const float dc = max_abs_diff(cl.data(), gl.data(), cl.numel());
  EXPECT_LT(dl, tol) << "logits vs CPU eager";
  // probs follow the logits (dp = p (dz - sum p dz)): logits within 1e-5 allow a few 1e-6; the
  // CPU compiled path's probs bound (1e-6) holds where its logits agree to 1e-6
  EXPECT_LT(dp, tol > 1e-5f ? tol : 3e-6f) << "probs vs CPU eager";
  EXPECT_LT(dc, tol) << "logits vs CPU compiled";
  const int64_t V = model.config().vocab_size;
  for (int64_t r = 0; r < B * T; ++r) EXPECT_EQ(argmax(el.data() + r * V, V), argmax(gl.data() + r * V, V)) << "row " << r;
  std::printf("cuda compiled (%s) vs CPU eager (B=%lld, T=%lld): logits %.3g, probs %.3g; vs CPU compiled %.3g\n", what.c_str(),
              static_cast<long long>(B), static_cast<long long>(T), dl, dp, dc);
  return dl;
}

float expect_model_matches(const GrammarMiniGPT& model, int64_t B, int64_t T, uint64_t seed, bool generated_gemm, bool pdl = false,
                           bool megakernel = false, int prologue = 1) {
  const std::string what = std::string(megakernel ? "megakernel" : generated_gemm ? "generated GEMMs" : "cuBLAS") + (pdl ? ", PDL" : "") +
                           (!generated_gemm || prologue == 1 ? ""
                            : prologue == 0                  ? ", layernorms unfused"
                            : prologue == 2                  ? ", attention prologue"
                                                             : ", attention in the MLP kernel");
  return expect_options_match(model, B, T, seed, cuda_options(generated_gemm, pdl, megakernel, prologue), what);
}

}  // namespace

TEST(CompileCuda, TinyHeadMatchesEagerWithin1e6) {
  SKIP_WITHOUT_GPU();
  const TinyHead head = TinyHead::init(42);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd;
  Tensor x = Tensor::empty({2, TinyHead::kIn});
  for (float& v : x.span()) v = nd(rng);
  Tensor eager = Tensor::empty({2, TinyHead::kOut});
  ThreadPool pool(1);
  head.forward(x.data(), 2, eager.data(), pool);
  const WeightBinding w = bind_tinyhead(head);
  for (bool gen : {false, true}) {
    Tensor compiled = Tensor::full({2, TinyHead::kOut}, NAN);  // poisoned: every element must be written
    CudaCompiledGraph cg(capture_tinyhead(2), w, cuda_options(gen));
    const void* in[] = {x.data()};
    float* out[] = {compiled.data()};
    cg.run(in, out);
    const float diff = max_abs_diff(eager.data(), compiled.data(), eager.numel());
    EXPECT_LT(diff, 1e-6f) << (gen ? "generated GEMM" : "cuBLAS");
    std::printf("TinyHead cuda (%s) vs eager: max abs diff %.3g\n", gen ? "generated GEMM" : "cuBLAS", diff);
  }
}

TEST(CompileCuda, SoftmaxEdgeRowsFollowTheProjectNumerics) {
  SKIP_WITHOUT_GPU();
  for (int64_t C : {40, 611, 5000}) {  // a warp per row (masked), a persistent row, a block per row
    GraphBuilder b("softmax_edges");
    const int x = b.input("x", {3, C});
    b.output(b.softmax(x, "y", "softmax (cpu::softmax)"), "y");
    const WeightBinding none;
    CudaCompiledGraph cg(b.finish(), none, cuda_options());
    Tensor in = Tensor::zeros({3, C}), out = Tensor::full({3, C}, 7.0f);
    in.at({0, 0}) = 1e30f;
    in.at({0, 2}) = -1e30f;
    in.at({1, 5}) = NAN;
    for (int64_t c = 0; c < C; ++c) in.at({2, c}) = -INFINITY;
    const void* ins[] = {in.data()};
    float* outs[] = {out.data()};
    cg.run(ins, outs);
    EXPECT_EQ(out.at({0, 0}), 1.0f) << C;
    for (int64_t c = 1; c < C; ++c) EXPECT_EQ(out.at({0, c}), 0.0f) << C;
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_TRUE(std::isnan(out.at({1, c}))) << C;
      EXPECT_TRUE(std::isnan(out.at({2, c}))) << C;
    }
  }
}

TEST(CompileCuda, ShippedModelMatchesEagerAndEveryProbe) {
  SKIP_WITHOUT_GPU();
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  expect_model_matches(model, 2, 16, 7, false);
  expect_model_matches(model, 2, 16, 7, true);
  const Tokenizer tok(f.vocab);
  const testcompile::ProbeBatch pb = testcompile::probe_batch(kProbes, tok);
  const std::vector<std::vector<int32_t>>& prompts = pb.prompts;
  const std::vector<int32_t>& ids = pb.ids;
  const int64_t B = pb.B, T = pb.T, V = f.config.vocab_size;
  ThreadPool pool(2);
  Tensor el, ep, gl, gp;
  model.forward(ids.data(), B, T, el, ep, pool);
  CudaCompiledModel gpu(model, cuda_options());
  gpu.forward(ids.data(), B, T, gl, gp);
  const float dl = max_abs_diff(el.data(), gl.data(), el.numel());
  EXPECT_LT(dl, 1e-5f);
  int same = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t last = static_cast<int64_t>(prompts[static_cast<size_t>(b)].size()) - 1;
    const float* e = el.data() + (b * T + last) * V;
    const float* g = gl.data() + (b * T + last) * V;
    EXPECT_EQ(argmax(e, V), argmax(g, V)) << "probe " << b;
    same += argmax(e, V) == argmax(g, V);
  }
  std::printf("every probe (B=%lld, T=%lld): max |logits diff| %.3g, same top-1 on %d of %lld\n", static_cast<long long>(B),
              static_cast<long long>(T), dl, same, static_cast<long long>(B));
}

TEST(CompileCuda, RandomWeightsAndOddShapesMatchEager) {
  SKIP_WITHOUT_GPU();
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT model(c, random_weights(c, 3));
  for (bool gen : {false, true}) {
    expect_model_matches(model, 2, 16, 11, gen);
    expect_model_matches(model, 3, 5, 12, gen);
  }
  // generated GEMMs with each layernorm a kernel of its own (no GEMM prologue), and with each
  // attention fused into its projection's GEMM too: max-autotune's "unfused-ln", "attn-prologue"
  for (int prologue : {0, 2}) {
    expect_model_matches(model, 2, 16, 11, true, false, false, prologue);
    expect_model_matches(model, 3, 5, 12, true, false, false, prologue);
  }
}

// The forms of the generated GEMMs that must not change a bit (FusedMlpAndEarlyWeightsChangeNoBit).
struct MlpForm {
  const char* name;
  bool weights_early, fuse_mlp, smem_vec4;
  int mlp_rows;
  bool proj, cluster, attention;
  bool push = false;  // mlp_push: fc2's partials pushed to the CTAs that finish them (else pulled by them)
  bool plain = false, ln_early = false, async = false;  // weights_plain, ln_weights_early, mlp_async
  bool next = false;                                    // fuse_mlp_next: the next block's layernorm and qkv in the MLP kernel
  bool next_all = false;                                // ... every CTA all of qkv's columns (mlp_next_split off)
};
constexpr MlpForm kMlpForms[] = {
    {"weights late", false, false, false, 2, false, false, false},
    {"x as float4s", true, false, true, 2, false, false, false},
    {"MLP fused, rows 1", true, true, false, 1, false, false, false},
    {"MLP fused, rows 4", true, true, false, 4, false, false, false},
    {"MLP fused, weights late", false, true, false, 2, false, false, false},
    {"MLP fused, x as float4s", true, true, true, 2, false, false, false},
    {"MLP fused with the projection, rows 1", true, true, false, 1, true, false, false},
    {"MLP fused with the projection, rows 2", true, true, false, 2, true, false, false},
    {"MLP fused with the projection, weights late", false, true, false, 2, true, false, false},
    {"MLP fused with the attention and the projection, rows 2", true, true, false, 2, true, false, true},
    {"MLP fused in clusters, rows 2", true, true, false, 2, false, true, false},
    {"MLP fused in clusters with the projection, rows 1", true, true, false, 1, true, true, false},
    {"MLP fused in clusters with the projection, rows 2", true, true, false, 2, true, true, false},
    {"MLP fused in clusters with the projection, rows 4", true, true, false, 4, true, true, false},
    {"MLP fused in clusters with the attention and the projection, rows 1", true, true, false, 1, true, true, true},
    {"MLP fused in clusters with the attention and the projection, rows 2", true, true, false, 2, true, true, true},
    {"MLP fused in clusters with the attention and the projection, rows 4", true, true, false, 4, true, true, true},
    {"MLP fused in clusters with the attention, weights late", false, true, false, 4, true, true, true},
    {"MLP fused in clusters with the projection, rows 1, partials pushed", true, true, false, 1, true, true, false, true},
    {"MLP fused in clusters with the projection, rows 2, partials pushed", true, true, false, 2, true, true, false, true},
    {"MLP fused in clusters with the projection, rows 4, partials pushed", true, true, false, 4, true, true, false, true},
    {"MLP fused in clusters, rows 2, partials pushed", true, true, false, 2, false, true, false, true},
    {"MLP fused in clusters with the attention and the projection, rows 1, partials pushed", true, true, false, 1, true, true, true, true},
    {"MLP fused in clusters with the attention and the projection, rows 2, partials pushed", true, true, false, 2, true, true, true, true},
    {"MLP fused in clusters with the attention and the projection, rows 4, partials pushed", true, true, false, 4, true, true, true, true},
    {"weights plain, layernorm weights early (MLP apart)", true, false, false, 2, false, false, false, false, true, true},
    {"MLP fused with the projection, rows 1, weights plain, layernorm weights early", true, true, false, 1, true, false, false, false, true, true},
    {"MLP fused with the projection, rows 2, weights plain, layernorm weights early", true, true, false, 2, true, false, false, false, true, true},
    {"MLP fused in clusters with the projection, rows 4, partials pushed, weights plain, layernorm weights early", true, true, false, 4, true, true,
     false, true, true, true},
    {"MLP fused in clusters with the projection, rows 4, partials pushed with st.async", true, true, false, 4, true, true, false, true, false,
     false, true},
    {"MLP fused in clusters with the projection, rows 1, partials pushed with st.async, weights plain, layernorm weights early", true, true,
     false, 1, true, true, false, true, true, true, true},
    {"MLP fused in clusters with the projection, rows 4, partials pushed with st.async, weights plain, layernorm weights early", true, true,
     false, 4, true, true, false, true, true, true, true},
    // 8-row tiles in clusters (the shipped model's 8 x 64 outputs: two per thread; not yet run on a GPU)
    {"MLP fused in clusters with the projection, rows 8, partials pushed with st.async, weights plain, layernorm weights early", true, true,
     false, 8, true, true, false, true, true, true, true},
    {"MLP fused in clusters with the projection, rows 8, partials pulled", true, true, false, 8, true, true, false, false, true, true, false},
};
// REPORT 7n: the next block's layernorm and qkv as the MLP kernel's tail (fuse_mlp_next), its
// own test (FusedMlpWithTheNextLayerNormChangeNoBit) so that each stays well under ctest's 90 s;
// the last form (every CTA all of qkv's columns) measured slower, kept as a word only.
constexpr MlpForm kMlpNextForms[] = {
    {"MLP fused in clusters with the projection and the next layernorm + qkv, rows 4, st.async", true, true, false, 4, true, true, false, true,
     true, true, true, true},
    {"MLP fused in clusters with the projection and the next layernorm + qkv, rows 8, st.async", true, true, false, 8, true, true, false, true,
     true, true, true, true},
    {"MLP fused in clusters with the projection and the next layernorm + qkv, rows 1, st.async", true, true, false, 1, true, true, false, true,
     true, true, true, true},
    {"MLP fused in clusters with the projection and the next layernorm + qkv (all its columns in every CTA), rows 4, st.async", true, true,
     false, 4, true, true, false, true, true, true, true, true, true},
};
void set_mlp_form(CudaCompileOptions& o, const MlpForm& form) {
  o.codegen.weights_early = form.weights_early;
  o.codegen.fuse_mlp = form.fuse_mlp;
  o.codegen.smem_vec4 = form.smem_vec4;
  o.codegen.mlp_rows = form.mlp_rows;
  o.codegen.fuse_mlp_proj = form.proj;
  o.codegen.mlp_cluster = form.cluster;
  o.codegen.fuse_mlp_attention = form.attention;
  o.codegen.mlp_push = form.push;
  o.codegen.weights_plain = form.plain;
  o.codegen.ln_weights_early = form.ln_early;
  o.codegen.mlp_async = form.async;
  o.codegen.fuse_mlp_next = form.next;
  o.codegen.mlp_next_split = !form.next_all;
}

// The weights loaded before PDL's wait (weights_early), the MLP as one kernel (fuse_mlp,
// generate_mlp) at tile heights of 1, 2 and 4 rows, with the attention's projection in it
// (fuse_mlp_proj) and the attention before it (fuse_mlp_attention: its values are the attention
// kernel's), as 8-CTA clusters (mlp_cluster) or a block per tile, x read from shared memory as
// float4s (smem_vec4), and in clusters fc2's partials pushed to the CTAs that finish them
// (mlp_push) or pulled by them, pushed with st.async onto an mbarrier (mlp_async), the weights'
// pointers plain (weights_plain) and the layernorms' gain and bias loaded before PDL's wait
// (ln_weights_early), compute every sum as before, in the same order: the logits and
// the probs equal those of the generated GEMMs without them (weights early, each MLP two
// kernels) bitwise, on random ids at
// (2, 16) and on the grammar probes (B = 126, T = 7: 882 rows, which tiles of 4 do not divide).
// Against the CPU's eager logits: 1e-5 at (2, 16); the probe batch, every one of its 882
// positions, 1e-4 (design.md's CUDA-against-CPU rule; the generated GEMMs, which sum K in 8
// slices, measured 1.91e-5 there on the H200 in every form, cuBLAS 6.9e-6: fp32 sums in another
// order, as the decode step's 4.5e-5) and the same top-1 at each probe's last position.
void expect_forms_change_no_bit(std::span<const MlpForm> forms) {
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  const Tokenizer tok(f.vocab);
  const testcompile::ProbeBatch pb = testcompile::probe_batch(kProbes, tok);
  const int64_t V = f.config.vocab_size;
  std::mt19937_64 rng(21);
  std::vector<int32_t> random_ids(32);
  for (int32_t& v : random_ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  struct Batch {
    const int32_t* ids;
    int64_t B, T;
    std::vector<int64_t> rows;  // whose top-1 must agree: every row, or each probe's last position
  };
  Batch random{random_ids.data(), 2, 16, {}}, probes{pb.ids.data(), pb.B, pb.T, {}};
  for (int64_t r = 0; r < 32; ++r) random.rows.push_back(r);
  for (int64_t b = 0; b < pb.B; ++b) probes.rows.push_back(b * pb.T + static_cast<int64_t>(pb.prompts[static_cast<size_t>(b)].size()) - 1);
  for (const Batch& in : {random, probes}) {
    CudaCompileOptions apart = cuda_options(true, hopper_or_later());
    apart.codegen.fuse_mlp = false;
    apart.codegen.smem_vec4 = false;
    apart.codegen.weights_early = true;
    Tensor l0, p0, el, ep;
    CudaCompiledModel(model, apart).forward(in.ids, in.B, in.T, l0, p0);
    for (const MlpForm& form : forms) {
      CudaCompileOptions o = apart;
      set_mlp_form(o, form);
      Tensor l1, p1;
      CudaCompiledModel(model, o).forward(in.ids, in.B, in.T, l1, p1);
      const float d = max_abs_diff(l0.data(), l1.data(), l0.numel()), dp = max_abs_diff(p0.data(), p1.data(), p0.numel());
      EXPECT_EQ(d, 0.0f) << form.name << " (" << in.B << ", " << in.T << ")";
      EXPECT_EQ(dp, 0.0f) << form.name << " (" << in.B << ", " << in.T << "): probs";
      std::printf("generated GEMMs (B=%lld, T=%lld): %s vs weights early, MLP apart: max |diff| %.3g, probs %.3g\n",
                  static_cast<long long>(in.B), static_cast<long long>(in.T), form.name, d, dp);
    }
    ThreadPool pool(2);
    model.forward(in.ids, in.B, in.T, el, ep, pool);
    const float dl = max_abs_diff(el.data(), l0.data(), el.numel());
    EXPECT_LT(dl, in.rows.size() == 32 ? 1e-5f : 1e-4f);
    int same = 0;
    for (int64_t r : in.rows) same += argmax(el.data() + r * V, V) == argmax(l0.data() + r * V, V);
    EXPECT_EQ(same, static_cast<int>(in.rows.size()));
    std::printf("generated GEMMs (B=%lld, T=%lld): vs CPU eager %.3g, same top-1 on %d of %lld\n", static_cast<long long>(in.B),
                static_cast<long long>(in.T), dl, same, static_cast<long long>(in.rows.size()));
  }
  // other widths (d = 32, fc1's K slices of 4) and 15 rows, which tiles of 2 and 4 do not divide
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT tiny(c, random_weights(c, 9));
  std::vector<int32_t> ids(15);
  for (int32_t& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
  CudaCompileOptions apart = cuda_options(true, hopper_or_later());
  apart.codegen.fuse_mlp = false;
  apart.codegen.smem_vec4 = false;
  apart.codegen.weights_early = true;
  Tensor l0, p0;
  CudaCompiledModel(tiny, apart).forward(ids.data(), 3, 5, l0, p0);
  for (const MlpForm& form : forms) {
    CudaCompileOptions o = apart;
    set_mlp_form(o, form);
    Tensor l1, p1;
    CudaCompiledModel(tiny, o).forward(ids.data(), 3, 5, l1, p1);
    EXPECT_EQ(max_abs_diff(l0.data(), l1.data(), l0.numel()), 0.0f) << form.name << " (tiny model, 3, 5)";
    EXPECT_EQ(max_abs_diff(p0.data(), p1.data(), p0.numel()), 0.0f) << form.name << " (tiny model, 3, 5): probs";
  }
}

TEST(CompileCuda, FusedMlpAndEarlyWeightsChangeNoBit) {
  SKIP_WITHOUT_GPU();
  expect_forms_change_no_bit(kMlpForms);
}

// fuse_mlp_next (REPORT 7n), the same checks: its forms' logits and probs those of the kernels apart
TEST(CompileCuda, FusedMlpWithTheNextLayerNormChangeNoBit) {
  SKIP_WITHOUT_GPU();
  expect_forms_change_no_bit(kMlpNextForms);
}

// The attention kernel's other layouts (a warp per query): heads of 12 floats (scalar staging),
// of 40 (two dimensions per lane), 37 queries (two key chunks per lane, a part-empty last query
// tile); standalone, as its projection's GEMM prologue and as the MLP kernel's first stage (heads
// of 12, with 4-row tiles that span two sequences: 74 rows; heads of 40 stay apart).
TEST(CompileCuda, AttentionLayoutsMatchEager) {
  SKIP_WITHOUT_GPU();
  for (const auto& [heads, d] : {std::pair{2, 24}, std::pair{1, 40}}) {
    ModelConfig c = compile_tiny_config();
    c.n_head = heads;
    c.d_model = d;
    c.block_size = 40;
    const GrammarMiniGPT model(c, random_weights(c, 4));
    for (int prologue : {1, 2, 3}) expect_model_matches(model, 2, 37, 13, true, false, false, prologue);
  }
}

// The decode step against the CPU's eager decoder, fed 64 random tokens. Held to design.md's
// CUDA-against-CPU rule (1e-3 on logits at most; 1e-4 here) and the same top-1 at every step, not
// to the forward's 1e-5: over 64 positions of random tokens the shipped model's fp32 logits are
// ill-conditioned at a few positions. Measured on the CPU (experiments/25-compile/REPORT.md):
// the CPU's eager decoder is itself 3.3e-5 from a float64 forward at position 54 of this very
// sequence, and a NumPy fp32 forward (another summation order) is 5.0e-5 from the eager decoder
// there; the H200's decode step was 4.5e-5 from it, within those. No decode-specific error hides
// in that figure: the next test holds the decode step to the compiled forward at 1e-6.
TEST(CompileCuda, DecodeStepMatchesTheEagerDecoder) {
  SKIP_WITHOUT_GPU();
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  Decoder eager(model);
  CudaCompiledDecoder gpu(model, cuda_options());
  ThreadPool pool(1);
  std::mt19937_64 rng(5);
  float worst = 0;
  int64_t worst_t = 0;
  for (int64_t t = 0; t < f.config.block_size; ++t) {
    const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(f.config.vocab_size));
    const std::span<const float> e = eager.step(id, pool);
    const std::span<const float> g = gpu.step(id);
    const float d = max_abs_diff(e.data(), g.data(), static_cast<int64_t>(e.size()));
    if (d > worst) worst = d, worst_t = t;
    EXPECT_EQ(argmax(e.data(), static_cast<int64_t>(e.size())), argmax(g.data(), static_cast<int64_t>(g.size()))) << "t " << t;
  }
  EXPECT_LT(worst, 1e-4f);
  std::printf("decode (cuBLAS) vs the CPU eager decoder, every position: max |logits diff| %.3g at position %lld\n", worst,
              static_cast<long long>(worst_t));
  EXPECT_THROW(gpu.step(0), minigpt::Error) << "the context is full";
}

// The decode step is the forward's last row: fed the same 64 tokens, step t's logits equal row t
// of the compiled forward at (B = 1, T = 64) within 1e-6 (same generated kernels, same sums: a
// wrong position, a stale or misplaced cache row, a mask off by one would show here), for the
// generated-GEMM graphs and the megakernel; the megakernel's decode also against the CPU's.
TEST(CompileCuda, DecodeStepEqualsTheCompiledForwardRowAtEveryPosition) {
  SKIP_WITHOUT_GPU();
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  const int64_t T = f.config.block_size, V = f.config.vocab_size;
  std::mt19937_64 rng(5);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int32_t& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  for (bool mega : {false, true}) {
    if (mega && !hopper_or_later()) continue;
    SCOPED_TRACE(mega ? "megakernel" : "generated GEMMs");
    CudaCompiledModel fwd(model, cuda_options(true, false, mega));
    Tensor logits = Tensor::full({1, T, V}, NAN), probs = Tensor::full({1, T, V}, NAN);
    fwd.forward(ids.data(), 1, T, logits, probs);
    CudaCompiledDecoder dec(model, cuda_options(true, false, mega));
    Decoder eager(model);
    ThreadPool pool(1);
    float worst = 0, worst_cpu = 0;
    for (int64_t t = 0; t < T; ++t) {
      const std::span<const float> g = dec.step(ids[static_cast<size_t>(t)]);
      const std::span<const float> e = eager.step(ids[static_cast<size_t>(t)], pool);
      const float d = max_abs_diff(logits.data() + t * V, g.data(), V);
      worst = std::max(worst, d);
      worst_cpu = std::max(worst_cpu, max_abs_diff(e.data(), g.data(), V));
      ASSERT_LT(d, 1e-6f) << "position " << t;
    }
    EXPECT_LT(worst_cpu, 1e-4f);
    std::printf("decode (%s) vs the compiled forward's rows (1, %lld): max |logits diff| %.3g; vs the CPU eager decoder %.3g\n",
                mega ? "megakernel" : "generated GEMMs", static_cast<long long>(T), worst, worst_cpu);
  }
}

// The whole forward as one launch: the megakernel against the CPU engine (1e-5 on the logits,
// the same top-1 on every row), at the shipped model's (2, 16) and at odd shapes.
TEST(CompileCuda, MegakernelMatchesEager) {
  SKIP_WITHOUT_GPU();
  if (!hopper_or_later()) GTEST_SKIP() << "thread-block clusters need sm_90 or later";
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  expect_model_matches(model, 2, 16, 7, true, false, true);
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT tiny(c, random_weights(c, 3));
  expect_model_matches(tiny, 3, 5, 12, true, false, true);
  expect_model_matches(tiny, 2, 16, 11, true, false, true);
  // replays give bitwise the same result (no race between stages)
  CudaCompiledModel gpu(model, cuda_options(true, false, true));
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 611);
  Tensor l1, p1, l2, p2;
  gpu.forward(ids.data(), 2, 16, l1, p1);
  for (int i = 0; i < 50; ++i) gpu.graph_for(2, 16).replay();
  gpu.forward(ids.data(), 2, 16, l2, p2);
  EXPECT_EQ(max_abs_diff(l1.data(), l2.data(), l1.numel()), 0.0f);
  EXPECT_EQ(max_abs_diff(p1.data(), p2.data(), p1.numel()), 0.0f);
  // CTAs of 1024 threads (several virtual blocks of a stage side by side): the same sums, the
  // same logits bitwise
  CudaCompileOptions wide = cuda_options(true, false, true);
  wide.codegen.megakernel_threads = 1024;
  CudaCompiledModel gpu_wide(model, wide);
  Tensor l3, p3;
  gpu_wide.forward(ids.data(), 2, 16, l3, p3);
  EXPECT_EQ(max_abs_diff(l1.data(), l3.data(), l1.numel()), 0.0f);
}

TEST(CompileCuda, ShapeGuardCompilesAnewAndTheCacheIsWarm) {
  SKIP_WITHOUT_GPU();
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT model(c, random_weights(c, 4));
  CudaCompiledModel gpu(model, cuda_options());
  std::vector<int32_t> ids(64, 1);
  Tensor l, p;
  gpu.forward(ids.data(), 2, 4, l, p);
  gpu.forward(ids.data(), 2, 4, l, p);
  EXPECT_EQ(gpu.compiles(), 1);
  gpu.forward(ids.data(), 1, 8, l, p);
  EXPECT_EQ(gpu.compiles(), 2) << "another shape fails the guard and compiles anew";
  CudaCompiledModel again(model, cuda_options());
  EXPECT_TRUE(again.graph_for(2, 4).stats().cache_hit) << "the same graph again: a cache hit";
}

// Last in the file: a launch problem with PDL would leave the context unusable for what follows.
TEST(CompileCuda, ProgrammaticDependentLaunchVariantMatchesEager) {
  SKIP_WITHOUT_GPU();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 9) GTEST_SKIP() << "PDL needs sm_90 or later";
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  expect_model_matches(model, 2, 16, 7, true, true);
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT tiny(c, random_weights(c, 3));
  expect_model_matches(tiny, 3, 5, 12, true, true);
}

// The rows form (codegen_cuda_rows.h: one kernel, a cluster of T CTAs per sequence, a row per
// CTA) against the CPU engine: the probes' logits within 1e-5 and the same top-1 on every probe;
// random ids within 1e-4 (kReorderedLogitTol: proj and fc2 sum by k-slices, not over all k in order
// as the CPU, the hand-written row split's order, for which model_cuda_test allows 1e-4 at random
// ids; it measured 9.54e-6 to 1.19e-5), the same top-1 on every row, at the shipped model's
// (2, 16), at odd shapes and with random weights of other widths; replays bitwise the same (no
// race between the stages, the ring and the k, v hand-over: every 10th of 200 runs against the
// first); the probes' batch runs the rows form itself (asserted) where its T fits a cluster.
TEST(CompileCuda, RowsFormMatchesEagerAndEveryProbe) {
  SKIP_WITHOUT_GPU();
  if (!hopper_or_later()) GTEST_SKIP() << "thread-block clusters need sm_90 or later";
  CudaCompileOptions o = cuda_options(true);
  o.codegen.rows = true;
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  constexpr float kReorderedLogitTol = 1e-4f;
  expect_options_match(model, 2, 16, 7, o, "rows", kReorderedLogitTol);
  expect_options_match(model, 3, 5, 8, o, "rows", kReorderedLogitTol);
  expect_options_match(model, 1, 1, 9, o, "rows", kReorderedLogitTol);
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT tiny(c, random_weights(c, 3));
  expect_options_match(tiny, 2, 16, 11, o, "rows, tiny", kReorderedLogitTol);
  expect_options_match(tiny, 3, 7, 12, o, "rows, tiny", kReorderedLogitTol);
  CudaCompiledModel gpu(model, o);
  ASSERT_EQ(gpu.graph_for(2, 16).lowered().code.launches.size(), 1u) << gpu.graph_for(2, 16).stats().why;
  // "rows", or with MINIGPT_CUDA_VARIANT's words (e.g. "rows rows-plain": the GPU script runs this
  // test with the plain text too)
  const std::string variant = gpu.graph_for(2, 16).stats().variant;
  EXPECT_TRUE(variant == "rows" || variant.starts_with("rows ")) << variant;
  std::printf("rows form variant: %s\n", variant.c_str());
  // every probe's top-1
  const Tokenizer tok(f.vocab);
  const testcompile::ProbeBatch pb = testcompile::probe_batch(kProbes, tok);
  if (pb.T <= kRowsMaxCluster) {
    ASSERT_EQ(gpu.graph_for(pb.B, pb.T).stats().variant, variant) << gpu.graph_for(pb.B, pb.T).stats().why;
    ThreadPool pool(2);
    Tensor el, ep, gl, gp;
    model.forward(pb.ids.data(), pb.B, pb.T, el, ep, pool);
    gpu.forward(pb.ids.data(), pb.B, pb.T, gl, gp);
    const float dl = max_abs_diff(el.data(), gl.data(), el.numel());
    EXPECT_LT(dl, 1e-5f);
    const int64_t V = f.config.vocab_size;
    int same = 0;
    for (int64_t b = 0; b < pb.B; ++b) {
      const int64_t last = static_cast<int64_t>(pb.prompts[static_cast<size_t>(b)].size()) - 1;
      const bool eq = argmax(el.data() + (b * pb.T + last) * V, V) == argmax(gl.data() + (b * pb.T + last) * V, V);
      EXPECT_TRUE(eq) << "probe " << b;
      same += eq;
    }
    std::printf("rows form, every probe (B=%lld, T=%lld): max |logits diff| %.3g, same top-1 on %d of %lld\n", static_cast<long long>(pb.B),
                static_cast<long long>(pb.T), dl, same, static_cast<long long>(pb.B));
  } else {
    std::printf("rows form: the probes' T = %lld > %d: refused (the fallback runs them)\n", static_cast<long long>(pb.T), kRowsMaxCluster);
  }
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 611);
  Tensor l1, p1, l2, p2;
  gpu.forward(ids.data(), 2, 16, l1, p1);
  for (int r = 0; r < 20; ++r) {  // 200 runs: every 10th (a forward: a replay and its outputs back) against the first
    for (int i = 0; i < 9; ++i) gpu.graph_for(2, 16).replay();
    gpu.forward(ids.data(), 2, 16, l2, p2);
    ASSERT_EQ(max_abs_diff(l1.data(), l2.data(), l1.numel()), 0.0f) << "run " << 10 * (r + 1);
    ASSERT_EQ(max_abs_diff(p1.data(), p2.data(), p1.numel()), 0.0f) << "run " << 10 * (r + 1);
  }
  // a shape the analysis refuses (T > 16) runs the fallback, saying why
  CudaCompiledModel longer(model, o);
  Tensor l3, p3;
  std::vector<int32_t> ids17(17, 3);
  longer.forward(ids17.data(), 1, 17, l3, p3);
  EXPECT_NE(longer.graph_for(1, 17).stats().why.find("rows form refused"), std::string::npos) << longer.graph_for(1, 17).stats().why;
}

// The rows form's default text (codegen_cuda_rows.h: the hand-written kernel's variants ported:
// hoisted LayerNorm loads, redux max, unrolled key and k loops, prewait and division-free slots)
// and its plain text (rows-plain, the text before them) give the same bits: the ports change
// where values are loaded and waited for, not one operation or its order. At the shipped model's
// (2, 16), at odd shapes (T = 5: the sum's butterfly over 8 lanes; T = 1) and on random weights of
// other widths; each against the CPU as well. The head likewise (lm_head's chains split by warp,
// the softmax fused into its stage on the logits in registers: the same operations in the same
// order), also at V = 300 and 660; d_model 96 at V = 200 (a stage's threads waiting on the
// mbarriers themselves: rw_piece_at) and d_model 32 at V = 1100 (three chains in warps 0..2).
// The default's attention stages (attention2_text: the v rows loaded up front, the exps gathered
// once) and its deferred matmuls (proj by heads in the attention stage, fc2 by slices in fc1's
// stage, the LayerNorm after each forming its input from the partials; the shapes whose slices do
// not line up keep the stage: the shipped model's d_model 64 defers both, 2 per layer, asserted)
// likewise: the same FMAs and additions in the same order.
// (Under MINIGPT_CUDA_VARIANT=rows-plain both would be the plain text: skipped.)
// the default rows text (o) and another (plain: its options) give the same bits at every case below
static void rows_texts_agree_bitwise(const CudaCompileOptions& o, const CudaCompileOptions& plain) {
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  const ModelConfig c = compile_tiny_config();
  const GrammarMiniGPT tiny(c, random_weights(c, 5));
  // the head's other forms (d_model 64, random weights): V = 300, one column per thread, the
  // softmax fused into lm_head's stage with threads holding none; V = 660, two chains in warps
  // 0..4 (warp 4 mixed), one in warps 5..15
  ModelConfig c300, c660;
  c300.vocab_size = 300;
  c660.vocab_size = 660;
  const GrammarMiniGPT m300(c300, random_weights(c300, 6)), m660(c660, random_weights(c660, 7));
  ModelConfig d96, d32;
  d96.d_model = 96;
  d96.vocab_size = 200;
  d32.d_model = 32;
  d32.vocab_size = 1100;
  const GrammarMiniGPT m96(d96, random_weights(d96, 8)), m32(d32, random_weights(d32, 9));
  struct Case {
    const GrammarMiniGPT* m;
    int64_t B, T;
  };
  for (const Case& k : {Case{&model, 2, 16}, Case{&model, 3, 5}, Case{&model, 1, 1}, Case{&tiny, 2, 16}, Case{&tiny, 3, 7}, Case{&m300, 2, 16},
                        Case{&m660, 3, 5}, Case{&m96, 2, 16}, Case{&m32, 3, 5}}) {
    const int64_t V = k.m->config().vocab_size;
    std::mt19937_64 rng(static_cast<uint64_t>(100 + k.B * 17 + k.T));
    std::vector<int32_t> ids(static_cast<size_t>(k.B * k.T));
    for (int32_t& v : ids) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
    CudaCompiledModel a(*k.m, o), b(*k.m, plain);
    Tensor la, pa, lb, pb;
    a.forward(ids.data(), k.B, k.T, la, pa);
    b.forward(ids.data(), k.B, k.T, lb, pb);
    ASSERT_EQ(a.graph_for(k.B, k.T).lowered().code.launches.size(), 1u) << a.graph_for(k.B, k.T).stats().why;
    ASSERT_EQ(b.graph_for(k.B, k.T).lowered().code.launches.size(), 1u) << b.graph_for(k.B, k.T).stats().why;
    // the default text's deferred matmuls (each LayerNorm forming its input from partials)
    const std::string& src = a.graph_for(k.B, k.T).lowered().code.source;
    size_t deferred = 0;
    for (size_t at = src.find("if (warp == 0) rw_layernorm_parts<"); at != std::string::npos; at = src.find("if (warp == 0) rw_layernorm_parts<", at + 1)) ++deferred;
    const std::string what = fmt::format("{} vs {} (B={}, T={}, V={}, d_model {}; {} deferred matmuls)", a.graph_for(k.B, k.T).stats().variant,
                                         b.graph_for(k.B, k.T).stats().variant, k.B, k.T, V, k.m->config().d_model, deferred);
    if (k.m == &model) {
      EXPECT_EQ(deferred, 2 * static_cast<size_t>(k.m->config().n_layer)) << what << ": proj and fc2 per layer";
    }
    EXPECT_EQ(max_abs_diff(la.data(), lb.data(), la.numel()), 0.0f) << what << ": logits";
    EXPECT_EQ(max_abs_diff(pa.data(), pb.data(), pa.numel()), 0.0f) << what << ": probs";
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), static_cast<size_t>(la.numel()) * sizeof(float)), 0) << what << ": logits' bits";
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), static_cast<size_t>(pa.numel()) * sizeof(float)), 0) << what << ": probs' bits";
    ThreadPool pool(2);
    Tensor el, ep;
    k.m->forward(ids.data(), k.B, k.T, el, ep, pool);
    const float dl = max_abs_diff(el.data(), la.data(), el.numel());
    EXPECT_LT(dl, 1e-4f) << what << " vs CPU eager";
    std::printf("rows form texts %s: logits max |diff| %.3g, probs %.3g; vs CPU eager %.3g\n", what.c_str(),
                max_abs_diff(la.data(), lb.data(), la.numel()), max_abs_diff(pa.data(), pb.data(), pa.numel()), dl);
  }
}

TEST(CompileCuda, RowsFormDefaultAndPlainTextsAgreeBitwise) {
  SKIP_WITHOUT_GPU();
  if (!hopper_or_later()) GTEST_SKIP() << "thread-block clusters need sm_90 or later";
  if (const char* v = std::getenv("MINIGPT_CUDA_VARIANT"); v && std::string(v).find("rows-plain") != std::string::npos)
    GTEST_SKIP() << "MINIGPT_CUDA_VARIANT=" << v << ": the default text is the plain one, nothing to compare";
  CudaCompileOptions o = cuda_options(true);
  o.codegen.rows = true;
  CudaCompileOptions plain = o;
  plain.codegen.rows_plain = true;
  rows_texts_agree_bitwise(o, plain);
}

// The rows form's stage trace (CudaCompiledGraph::trace_rows: the traced text compiled and launched
// apart from the timed one): one interval per stage plus the start and the attentions' steps (the
// k, v wait; scores, max, sum, probabilities x v, store; the last warp's prewait where the
// attention's closing barrier has one: not before a deferred proj, whose pieces were prewaited with
// the attention's), every one positive but the last warp's (another thread's stamp: < 0 when its
// prewait was done before thread 0's store) and the deferred matmuls' (two adjacent stamps: their
// work is in the stages before and after them; >= 0), for the default and rows-plain texts; those with
// no work of their own (stage 0's, done during the start; the default's softmax, fused into lm_head's
// stage: two adjacent stamps) labelled so and shorter than every matmul's; the
// %globaltimer span positive; the outputs after the traced launches bitwise the
// timed graph's (the stamps change no value), and the timed graph's next forward unchanged too.
TEST(CompileCuda, RowsFormStageTraceCoversEveryStageAndChangesNoOutput) {
  SKIP_WITHOUT_GPU();
  if (!hopper_or_later()) GTEST_SKIP() << "thread-block clusters need sm_90 or later";
  for (const bool plain : {false, true}) {  // the default, rows-plain
    CudaCompileOptions o = cuda_options(true);
    o.codegen.rows = true;
    o.codegen.rows_plain = plain;
    ModelFile f = load_model(kModel);
    const GrammarMiniGPT model(f.config, std::move(f.weights));
    CudaCompiledModel gpu(model, o);
    std::vector<int32_t> ids(32);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 53 + 11) % 611);
    Tensor l1, p1, l2, p2;
    gpu.forward(ids.data(), 2, 16, l1, p1);
    CudaCompiledGraph& g = gpu.graph_for(2, 16);
    ASSERT_EQ(g.lowered().code.launches.size(), 1u) << g.stats().why;
    const CudaCompiledGraph::RowsTrace tr = g.trace_rows();
    const RowsPlan rp = plan_rows(g.captured());
    const size_t S = rp.stages.size(), A = static_cast<size_t>(rp.attentions);
    // the default text fuses the softmax and prewaits (not the plain one, nor the default under MINIGPT_CUDA_VARIANT=rows-plain)
    const char* env = std::getenv("MINIGPT_CUDA_VARIANT");
    const bool fused = !plain && !(env && std::string(env).find("rows-plain") != std::string::npos);
    // the default's attentions followed by a deferred proj (by heads): their closing barrier prewaits nothing
    const std::string& timed = g.lowered().code.source;
    size_t by_heads = 0;
    for (size_t at = timed.find("deferred (by heads)"); at != std::string::npos; at = timed.find("deferred (by heads)", at + 1)) ++by_heads;
    EXPECT_EQ(by_heads, fused ? A : 0u) << "the shipped model's proj deferred in every layer (not in the plain text)";
    // the start, every stage, per attention its k, v wait, 5 steps of thread 0 and (prewaiting) the last warp's prewait
    const size_t N = S + 1 + A * 6 + (fused ? A - by_heads : 0);
    ASSERT_EQ(tr.cycles.size(), N) << "the start, every stage, the attentions' steps";
    ASSERT_EQ(tr.stages.size(), N);
    long long busy_min = std::numeric_limits<long long>::max(), idle_max = 0;
    size_t idle = 0;
    for (size_t i = 0; i < tr.cycles.size(); ++i) {
      const std::string& n = tr.stages[i];
      // the last warp's stamp is another thread's (the same SM's clock): before thread 0's store (< 0) where its prewait was off the path
      const bool deferred = n.find("(deferred: in stages ") != std::string::npos;
      if (deferred) {
        EXPECT_GE(tr.cycles[i], 0) << n << ": two adjacent stamps";
      } else if (n.find("the last warp's prewait") == std::string::npos) {
        EXPECT_GT(tr.cycles[i], 0) << n;
      }
      if (n.ends_with("(in the start)") || n.find("(fused into stage ") != std::string::npos) {
        idle_max = std::max(idle_max, tr.cycles[i]);
        ++idle;
      } else if (deferred) {
        // (a deferred matmul: its work in the stages before and after it, its interval two adjacent
        // stamps; neither counted)
      } else if (n.find(": matmul -> ") != std::string::npos && n.find("rw_kv_wait") == std::string::npos) {
        busy_min = std::min(busy_min, tr.cycles[i]);
      }
    }
    EXPECT_EQ(idle, fused ? 2u : 1u) << "stage 0 in the start; the default's softmax fused";
    EXPECT_EQ(tr.stages.back(), fmt::format("stage {}: {}", S - 1, fused ? fmt::format("softmax -> probs (fused into stage {})", S - 2) : "softmax -> probs"));
    EXPECT_LT(idle_max, busy_min) << "an interval without work of its own against the shortest matmul";
    EXPECT_GT(tr.total_ns, 0.0);
    EXPECT_TRUE(tr.outputs_same) << "the traced launches changed an output";
    EXPECT_EQ(g.lowered().code.source.find("rw_trace"), std::string::npos) << "the timed text is the untraced one";
    EXPECT_NE(tr.source.find("rw_trace"), std::string::npos);
    gpu.forward(ids.data(), 2, 16, l2, p2);
    EXPECT_EQ(std::memcmp(l1.data(), l2.data(), static_cast<size_t>(l1.numel()) * sizeof(float)), 0) << "logits after the trace";
    std::printf("rows form stage trace (%s): %zu intervals, %lld cycles, %.0f ns by %%globaltimer; start %lld, %s %lld, %s %lld\n",
                g.stats().variant.c_str(), tr.cycles.size(), tr.total_cycles, tr.total_ns, tr.cycles[0], tr.stages[1].c_str(), tr.cycles[1],
                tr.stages.back().c_str(), tr.cycles.back());
  }
}
