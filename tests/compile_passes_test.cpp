// Each pass of the compiler (compile/passes/), the schedule's kernels and names, and the C++
// generator's output read as text (no compiler run here: compile_model_test runs the code).
#include "compile/capture.h"
#include "compile/codegen_cpp.h"
#include "compile/passes/passes.h"
#include "compile/runner.h"
#include "compile/schedule.h"

#include "compile_test_config.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

ModelConfig tiny_config() { return compile_tiny_config(); }

int count(const Graph& g, Op op) {
  int n = 0;
  for (const Node& x : g.nodes) n += x.op == op;
  return n;
}

std::set<int> groups_of(const Graph& g, Op op) {
  std::set<int> s;
  for (const Node& n : g.nodes)
    if (n.op == op) s.insert(n.group);
  return s;
}

// The pipeline up to a pass, verified after each step.
Graph through(Graph g, std::initializer_list<Graph (*)(Graph)> passes) {
  for (auto p : passes) {
    g = p(std::move(g));
    verify(g, "test pipeline");
  }
  return g;
}

}  // namespace

TEST(CompilePasses, DecomposeSplitsSoftmaxAndLayerNorm) {
  const Graph g = through(capture_tinyhead(2), {decompose});
  EXPECT_EQ(count(g, Op::Softmax), 0);
  EXPECT_EQ(count(g, Op::ReduceMax), 1);
  EXPECT_EQ(count(g, Op::ReduceSum), 1);
  EXPECT_EQ(count(g, Op::Exp), 1);
  EXPECT_EQ(count(g, Op::Div), 1);
  EXPECT_EQ(g.tensor(g.nodes.back().output).name, "y");  // the composite's output keeps its id
  const Graph m = through(capture_gpt(tiny_config(), 1, 4), {fuse_attention, decompose});
  EXPECT_EQ(count(m, Op::LayerNorm), 0);
  EXPECT_EQ(count(m, Op::Rsqrt), 2 * 2 + 1);
  for (const Node& n : m.nodes)
    if (n.op == Op::ReduceSum && n.origin == "layernorm") {
      EXPECT_TRUE(n.acc_f64);
    }
}

TEST(CompilePasses, FuseAttentionReplacesThePiecesPerLayer) {
  const Graph g = through(capture_gpt(tiny_config(), 2, 5), {fuse_attention});
  EXPECT_EQ(count(g, Op::Attention), 2);
  for (Op op : {Op::SplitHeads, Op::AttnScores, Op::CausalMask, Op::WeightedSum, Op::MergeHeads, Op::Softmax})
    EXPECT_EQ(count(g, op), op == Op::Softmax ? 1 : 0) << op_name(op);  // the probs softmax stays
}

TEST(CompilePasses, MatmulEpilogueFoldsBiasGeluAndResidual) {
  const Graph t = through(capture_tinyhead(2), {decompose, matmul_epilogue});
  EXPECT_EQ(count(t, Op::BiasAdd), 0);
  EXPECT_TRUE(t.nodes[0].has_bias);
  const Graph g = through(capture_gpt(tiny_config(), 1, 4), {fuse_attention, decompose, matmul_epilogue});
  int gelu = 0, residual = 0, bias = 0;
  for (const Node& n : g.nodes) {
    if (n.op != Op::Matmul) continue;
    gelu += n.gelu;
    residual += n.has_residual;
    bias += n.has_bias;
  }
  EXPECT_EQ(gelu, 2);      // fc1 per block
  EXPECT_EQ(residual, 4);  // proj and fc2 per block
  EXPECT_EQ(bias, 9);      // every Linear
  EXPECT_EQ(count(g, Op::Gelu), 0);
  EXPECT_EQ(count(g, Op::BiasAdd), 0);
}

TEST(CompilePasses, PointwiseFusionMergesTheEmbeddingChain) {
  const Graph g = through(capture_gpt(tiny_config(), 1, 4), {fuse_attention, decompose, matmul_epilogue, fuse_pointwise});
  const std::set<int> e = groups_of(g, Op::Embedding);
  const std::set<int> p = groups_of(g, Op::PosEmbedding);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e, p);
  // wte[ids] and wpe[t] are never stored: only their sum is
  for (const Node& n : g.nodes)
    if (n.op == Op::Embedding || n.op == Op::PosEmbedding) {
      EXPECT_FALSE(g.tensor(n.output).materialized);
    }
}

TEST(CompilePasses, ReductionFusionMakesSoftmaxOneKernelWithoutExpTensor) {
  const Graph g = through(capture_tinyhead(2), {decompose, matmul_epilogue, fuse_pointwise, fuse_reductions});
  std::set<int> softmax_groups;
  for (const Node& n : g.nodes)
    if (n.origin == "softmax") softmax_groups.insert(n.group);
  EXPECT_EQ(softmax_groups.size(), 1u);
  for (const Node& n : g.nodes) {
    if (n.op == Op::Exp || n.op == Op::ReduceMax || n.op == Op::Sub || n.op == Op::ReduceSum) {
      EXPECT_FALSE(g.tensor(n.output).materialized) << op_name(n.op);
    }
  }
  const Schedule s = schedule(plan_buffers(g), GemmBackend::kEngine);
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.kernels[0].name, "extern_linear_0");
  // by default (kAuto) the rule names it: (2, 64) x (64, 600) is generated on AVX-512
  EXPECT_EQ(schedule(plan_buffers(g)).kernels[0].name,
            gemm_generated_by_rule(2, gemm_isa(active_isa())) ? "cpp_gemm_0" : "extern_linear_0");
  EXPECT_EQ(schedule(plan_buffers(g), GemmBackend::kGenerated).kernels[0].name, "cpp_gemm_0");
  EXPECT_EQ(s.kernels[1].name, "cpp_fused_softmax_1");
  EXPECT_EQ(s.kernels[1].removed.size(), 4u);  // max, x - max, exp, sum
}

TEST(CompilePasses, LayerNormIsOneKernelWithTheResidualAddFoldedIn) {
  // Without matmul epilogues the residual add is a pointwise op; reduction fusion folds it
  // into the layernorm after it.
  PassOptions opt;
  opt.epilogue = false;
  const Schedule s = schedule(run_passes(capture_gpt(tiny_config(), 1, 4), opt));
  int add_layernorm = 0;
  for (const Kernel& k : s.kernels)
    add_layernorm += k.name.find("_add_") != std::string::npos && k.name.find("layernorm") != std::string::npos;
  EXPECT_GE(add_layernorm, 2 * 2) << print_schedule(s);
  // with epilogues (the default), the residual goes into the GEMM and the layernorm is alone,
  // except the first, which the embedding's add joins
  const Schedule d = schedule(run_passes(capture_gpt(tiny_config(), 1, 4)));
  EXPECT_EQ(d.kernels[0].name, "cpp_fused_add_embedding_layernorm_pos_embedding_0") << print_schedule(d);
  int layernorm = 0;
  for (const Kernel& k : d.kernels) layernorm += k.name.starts_with("cpp_fused_layernorm_");
  EXPECT_EQ(layernorm, 2 * 2) << print_schedule(d);
}

TEST(CompilePasses, MatmulPrologueFoldsLayerNormsAndAttentionsIntoTheirGemms) {
  const ModelConfig c = tiny_config();
  // off by default: the C++ back end's pipeline is unchanged
  for (const Kernel& k : schedule(run_passes(capture_gpt(c, 1, 4))).kernels) EXPECT_NE(k.kind, KernelKind::PrologueMatmul) << k.name;
  PassOptions opt;
  opt.matmul_prologue = true;
  opt.attention_prologue = true;
  const Graph g = run_passes(capture_gpt(c, 1, 4), opt);  // verified after every pass
  const Schedule s = schedule(g);
  int layernorms = 0, attentions = 0;
  for (const Kernel& k : s.kernels) {
    const bool ln = k.name.find("layernorm") != std::string::npos, attn = k.name.find("attention") != std::string::npos;
    EXPECT_EQ(ln || attn, k.kind == KernelKind::PrologueMatmul) << "none left alone: " << print_schedule(s);
    if (k.kind != KernelKind::PrologueMatmul) continue;
    layernorms += ln;
    attentions += attn;
    const Node& mm = g.nodes[static_cast<size_t>(k.nodes.back())];
    ASSERT_EQ(mm.op, Op::Matmul) << k.name;
    EXPECT_FALSE(g.tensor(mm.inputs[0]).materialized) << "x lives in the GEMM's shared memory";
    EXPECT_EQ(k.rows, g.tensor(mm.inputs[0]).rows());
    EXPECT_EQ(k.cols, c.d_model);
    EXPECT_TRUE(k.name.ends_with("_matmul_" + std::to_string(k.group))) << k.name;
  }
  EXPECT_EQ(layernorms, 2 * c.n_layer + 1) << "ln1 and ln2 of every block, and ln_f: " << print_schedule(s);
  EXPECT_EQ(attentions, c.n_layer) << "each attention with its output projection: " << print_schedule(s);
  // the first block's: the embedding's sum is the residual stream, read again by the attention's
  // projection, so the fused kernel still stores it
  EXPECT_EQ(s.kernels[0].kind, KernelKind::PrologueMatmul) << print_schedule(s);
  EXPECT_EQ(s.kernels[0].writes.size(), 2u) << "the residual stream and the qkv";
  // the decode step's attention reads the KV caches at a runtime position: left alone
  for (const Kernel& k : schedule(run_passes(capture_gpt_decode(c), opt)).kernels) {
    if (k.name.find("attention") != std::string::npos) {
      EXPECT_EQ(k.kind, KernelKind::Attention) << k.name;
    }
  }
  // each kind on its own switch
  opt.attention_prologue = false;
  for (const Kernel& k : schedule(run_passes(capture_gpt(c, 1, 4), opt)).kernels) {
    if (k.name.find("attention") != std::string::npos) {
      EXPECT_EQ(k.kind, KernelKind::Attention) << k.name;
    }
  }
  opt.matmul_prologue = false;
  opt.attention_prologue = true;
  for (const Kernel& k : schedule(run_passes(capture_gpt(c, 1, 4), opt)).kernels)
    EXPECT_EQ(k.name.find("layernorm") != std::string::npos, k.kind == KernelKind::Rowwise && k.name.find("layernorm") != std::string::npos)
        << k.name;
}

TEST(CompilePasses, MatmulPrologueLeavesALayerNormReadTwiceAlone) {
  GraphBuilder b("ln_two_readers");
  const int x = b.input("x", {4, 16});
  const int w = b.weight("ln.weight", {16}), bias = b.weight("ln.bias", {16});
  const int W = b.weight("fc.weight", {8, 16});
  const int ln = b.layernorm(x, w, bias, 1e-5f, "ln.out", "test");
  b.output(b.matmul(ln, W, "y", "test"), "y");
  b.output(b.unary(Op::Exp, ln, "e", "test"), "e");  // a second reader of the layernorm
  PassOptions opt;
  opt.matmul_prologue = true;
  for (const Kernel& k : schedule(run_passes(b.finish(), opt)).kernels) EXPECT_NE(k.kind, KernelKind::PrologueMatmul) << k.name;
}

TEST(CompilePasses, RemoveDeadDropsUnusedNodes) {
  GraphBuilder b("dead");
  const int x = b.input("x", {2, 8});
  const int used = b.unary(Op::Exp, x, "used", "test");
  b.unary(Op::MulScalar, x, "unused", "test", 2.0f);
  b.output(used, "y");
  const Graph g = remove_dead(b.graph());
  verify(g, "remove_dead");
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, Op::Exp);
}

TEST(CompilePasses, PlanBuffersReusesBytesAndKeepsLiveTensorsApart) {
  const Graph g = run_passes(capture_gpt(tiny_config(), 2, 8));  // verified inside, overlap included
  int64_t total = 0;
  int planned = 0;
  for (const Node& n : g.nodes) {
    const TensorInfo& t = g.tensor(n.output);
    if (t.arena_offset >= 0) {
      total += t.bytes();
      ++planned;
      EXPECT_EQ(t.arena_offset % 64, 0);
    } else {
      EXPECT_TRUE(!t.materialized || t.kind != TensorKind::Intermediate) << t.name;
    }
  }
  EXPECT_GT(planned, 10);
  EXPECT_LT(g.arena_bytes, total / 2) << "no reuse: " << g.arena_bytes << " of " << total;
}

TEST(CompilePasses, CodegenPicksTheAttentionBodyByShape) {
  // A forward whose T queries fit one vector (T <= lanes) takes the one-block body (a plain
  // softmax over all keys at once); a longer one the online softmax over blocks of keys. The
  // results of each are checked against eager in compile_model_test (T = 16 and 7 with 16
  // lanes, 19 with 32 lanes: the block body; 21 and 19 with 16 and 8 lanes: the blocks).
  ModelConfig c = tiny_config();  // dh = 16
  c.block_size = 24;
  auto source = [&](int64_t T, int lanes) {
    CompileOptions o;
    o.codegen.vec_width = lanes;
    return lower(capture_gpt(c, 2, T), o).code.source;
  };
  const std::string one_block = "all keys at once", blocks = "online softmax";
  const std::string t16 = source(16, 16), t7 = source(7, 16), t21 = source(21, 16), t16w8 = source(16, 8), t16w32 = source(16, 32);
  EXPECT_NE(t16.find(one_block), std::string::npos);
  EXPECT_NE(t16.find("mg_transpose16(qt);"), std::string::npos);  // dh = lanes = 16: the register transpose
  EXPECT_EQ(t16.find(blocks), std::string::npos);
  EXPECT_NE(t7.find(one_block), std::string::npos);
  EXPECT_NE(t16w32.find(one_block), std::string::npos);
  EXPECT_EQ(t16w32.find("mg_transpose16(qt);"), std::string::npos);  // 32 lanes: q gathered lane by lane
  EXPECT_NE(t21.find(blocks), std::string::npos);
  EXPECT_EQ(t21.find(one_block), std::string::npos);
  EXPECT_NE(t16w8.find(blocks), std::string::npos);
}

TEST(CompilePasses, CodegenGeneratesLoopsNotEagerCalls) {
  // The engine's GEMM forced (what this test reads for); by default (kAuto) the matmuls are
  // generated GEMMs on AVX-512 (their prelude embeds vec_math_avx512.h, namespace cpu::avx512).
  CompileOptions engine;
  engine.codegen.gemm = GemmBackend::kEngine;
  const Lowered l = lower(capture_gpt(tiny_config(), 2, 8), engine);
  const Lowered by_rule = lower(capture_gpt(tiny_config(), 2, 8), {});
  const bool generated = gemm_generated_by_rule(16, gemm_isa(active_isa()));
  EXPECT_EQ(by_rule.code.source.find("rt->linear_packed(") == std::string::npos, generated);
  EXPECT_EQ(by_rule.code.gemms.empty(), !generated);
  const std::string& src = l.code.source;
  // eager kernels are only named in comments, never called
  std::string code = src;  // without /* ... */ comments
  for (size_t b = code.find("/*"); b != std::string::npos; b = code.find("/*")) code.erase(b, code.find("*/", b) + 2 - b);
  size_t pos = 0;
  while (pos < code.size()) {
    const size_t end = code.find('\n', pos);
    const std::string line = code.substr(pos, end - pos);
    EXPECT_EQ(line.substr(0, line.find("//")).find("cpu::"), std::string::npos) << line;
    pos = end == std::string::npos ? code.size() : end + 1;
  }
  EXPECT_EQ(src.find("#include \""), std::string::npos);                    // self-contained
  EXPECT_NE(src.find("extern \"C\" void call("), std::string::npos);
  EXPECT_NE(src.find("rt->linear_packed("), std::string::npos);
  EXPECT_NE(src.find("MG_RUNTIME_ABI_VERSION"), std::string::npos);
  EXPECT_NE(src.find("= mg_exp_nonpos_v(tmp"), std::string::npos);  // softmax's exp(x - max), generated
  EXPECT_NE(src.find("// scalar tail"), std::string::npos);  // d = 32 is a multiple of 16, V = 50 is not
  for (const Kernel& k : l.schedule.kernels) {
    EXPECT_NE(src.find("// " + k.name + "\n"), std::string::npos) << k.name;
    EXPECT_NE(src.find("FLOPs"), std::string::npos);
  }
  EXPECT_EQ(l.code.kernels.size(), l.schedule.kernels.size());
  // the same op in another block is the same loops: emitted once, called twice
  size_t attention_bodies = 0;
  for (size_t at = src.find("_pairs(void* ctx"); at != std::string::npos; at = src.find("_pairs(void* ctx", at + 1)) ++attention_bodies;
  EXPECT_EQ(attention_bodies, 1u);
  EXPECT_NE(src.find("same loops as cpp_fused_attention_"), std::string::npos);
  // so is a layernorm of the same width, although its temporaries are numbered by graph node:
  // one body for ln2 of every block and ln1 of blocks after the first (the first ln1 is fused
  // into the embedding kernel)
  const std::regex layernorm_body(R"(static void cpp_fused_layernorm_[0-9]+_rows\(void\* ctx)");
  EXPECT_EQ(std::distance(std::sregex_iterator(src.begin(), src.end(), layernorm_body), std::sregex_iterator()), 1);
  // and a generated GEMM's wrapper: one per distinct GEMM (shape and epilogue), not per layer
  const std::regex gemm_wrapper(R"(static void cpp_gemm_[0-9]+_tasks\(void\* ctx)");
  const std::regex gemm_used(R"(generated GEMM (mg_gemm_\w+))");
  std::set<std::string> distinct_gemms;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), gemm_used); it != std::sregex_iterator(); ++it)
    distinct_gemms.insert((*it)[1].str());
  EXPECT_EQ(static_cast<size_t>(std::distance(std::sregex_iterator(src.begin(), src.end(), gemm_wrapper), std::sregex_iterator())),
            distinct_gemms.size());
  // the attention kernel holds no score matrix: no (T, T) buffer in the arena
  for (const Node& n : l.schedule.graph.nodes) EXPECT_NE(n.op, Op::AttnScores);
}
