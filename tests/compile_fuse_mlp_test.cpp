// fuse_mlp (compile/passes/fuse_mlp.cpp) on the CPU: the grouping (each MLP's fc1, with its
// layernorm prologue, and fc2 as one group; h no longer materialised), the verifier after it
// (run_passes verifies after every pass), the schedule's kernel for it, where it must refuse,
// and that the C++ back end's pipeline is unchanged when the option is off.
#include "compile/capture.h"
#include "compile/passes/passes.h"
#include "compile/schedule.h"

#include "compile_test_config.h"

#include <gtest/gtest.h>

#include <string>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

PassOptions mlp_options(bool with_prologue) {
  PassOptions opt;
  opt.matmul_prologue = with_prologue;
  opt.fuse_mlp = true;
  return opt;
}

int mlp_kernels(const Schedule& s) {
  int n = 0;
  for (const Kernel& k : s.kernels) n += k.name.find("_mlp_") != std::string::npos;
  return n;
}

}  // namespace

TEST(CompileFuseMlp, EachMlpBecomesOneGroupAndHIsNotStored) {
  const ModelConfig c = compile_tiny_config();
  for (bool prologue : {true, false}) {
    SCOPED_TRACE(prologue ? "with the layernorm prologue" : "fc1 without a prologue");
    const Graph g = run_passes(capture_gpt(c, 2, 5), mlp_options(prologue));  // verified after every pass
    const Schedule s = schedule(g);
    EXPECT_EQ(mlp_kernels(s), c.n_layer) << print_schedule(s);
    for (const Kernel& k : s.kernels) {
      if (k.name.find("_mlp_") == std::string::npos) {
        EXPECT_FALSE(mlp_parts(g, k).mlp) << k.name << ": only the MLP kernels are MLPs";
        continue;
      }
      EXPECT_EQ(k.kind, KernelKind::PrologueMatmul) << k.name;
      ASSERT_GE(k.nodes.size(), 2u);
      const Node& fc1 = g.nodes[static_cast<size_t>(k.nodes[k.nodes.size() - 2])];
      const Node& fc2 = g.nodes[static_cast<size_t>(k.nodes.back())];
      ASSERT_EQ(fc1.op, Op::Matmul) << k.name;
      ASSERT_EQ(fc2.op, Op::Matmul) << k.name;
      EXPECT_TRUE(fc1.gelu) << "fc1 keeps its GELU epilogue";
      EXPECT_TRUE(fc2.has_residual) << "fc2 keeps its residual epilogue";
      EXPECT_EQ(fc2.inputs[0], fc1.output) << "fc2 reads fc1's h";
      EXPECT_FALSE(g.tensor(fc1.output).materialized) << "h lives in the GEMM's shared memory";
      EXPECT_EQ(k.rows, g.tensor(fc1.inputs[0]).rows());
      EXPECT_EQ(k.cols, c.d_model) << "the prologue's rows: fc1's x";
      EXPECT_EQ(k.name.find("cpp_fused_layernorm_mlp_") == 0, prologue) << k.name;
      const MlpParts parts = mlp_parts(g, k);
      EXPECT_TRUE(parts.mlp && !parts.proj && !parts.attention) << k.name;
      if (prologue) {
        EXPECT_FALSE(g.tensor(fc1.inputs[0]).materialized) << "the layernorm's rows too";
      } else {
        EXPECT_EQ(k.nodes.size(), 2u) << k.name;
      }
    }
  }
  // the decode step's MLPs too (one row)
  EXPECT_EQ(mlp_kernels(schedule(run_passes(capture_gpt_decode(c), mlp_options(true)))), c.n_layer);
}

TEST(CompileFuseMlp, OffByDefaultSoTheCppBackEndIsUnchanged) {
  const ModelConfig c = compile_tiny_config();
  EXPECT_EQ(mlp_kernels(schedule(run_passes(capture_gpt(c, 2, 5)))), 0);
  PassOptions opt;
  opt.matmul_prologue = true;
  EXPECT_EQ(mlp_kernels(schedule(run_passes(capture_gpt(c, 2, 5), opt))), 0);
}

// Where it must not merge: h read by a second node, h a graph output, and a first matmul with a
// residual epilogue (not an MLP's fc1).
TEST(CompileFuseMlp, RefusesWhenHHasAnotherReaderOrIsAnOutput) {
  auto two_matmuls = [](bool second_reader, bool h_output) {
    GraphBuilder b("mlp_like");
    const int x = b.input("x", {4, 16});
    const int w1 = b.weight("fc1.weight", {32, 16}), w2 = b.weight("fc2.weight", {16, 32});
    const int h = b.matmul(x, w1, "h", "test");
    if (h_output) b.output(h, "h");
    b.output(b.matmul(h, w2, "y", "test"), "y");
    if (second_reader) b.output(b.unary(Op::Exp, h, "e", "test"), "e");
    return b.finish();
  };
  PassOptions opt = mlp_options(true);
  EXPECT_EQ(mlp_kernels(schedule(run_passes(two_matmuls(false, false), opt))), 1) << "the plain pair merges";
  EXPECT_EQ(mlp_kernels(schedule(run_passes(two_matmuls(true, false), opt))), 0) << "h read twice";
  EXPECT_EQ(mlp_kernels(schedule(run_passes(two_matmuls(false, true), opt))), 0) << "h a graph output";
}

// fuse_mlp_proj: the attention's projection (its residual epilogue) joins each MLP's group
// before the layernorm; its result (read by the layernorm and by fc2's residual, both in the
// group) is no longer materialised. Without the layernorm prologue there is no row-wise stage
// for it to feed in the group: nothing merges.
TEST(CompileFuseMlp, TheProjectionJoinsTheMlpBeforeItsLayerNorm) {
  const ModelConfig c = compile_tiny_config();
  for (const Graph& captured : {capture_gpt(c, 2, 5), capture_gpt_decode(c)}) {
    PassOptions opt = mlp_options(true);
    opt.fuse_mlp_proj = true;
    const Graph g = run_passes(captured, opt);
    const Schedule s = schedule(g);
    int projs = 0;
    for (const Kernel& k : s.kernels) {
      if (k.name.find("_mlp_") == std::string::npos) continue;
      ASSERT_EQ(k.name.find("cpp_fused_proj_layernorm_mlp_"), 0u) << k.name;
      ++projs;
      const Node& p = g.nodes[static_cast<size_t>(k.nodes[0])];
      const Node& fc2 = g.nodes[static_cast<size_t>(k.nodes.back())];
      ASSERT_EQ(p.op, Op::Matmul) << k.name;
      EXPECT_TRUE(p.has_residual) << "the projection keeps its residual epilogue";
      EXPECT_EQ(fc2.inputs.back(), p.output) << "fc2's residual is the projection's result";
      EXPECT_FALSE(g.tensor(p.output).materialized) << "the projection's rows live in the kernel's shared memory";
      EXPECT_EQ(k.cols, c.d_model);
      const MlpParts parts = mlp_parts(g, k);
      EXPECT_TRUE(parts.mlp && parts.proj && !parts.attention) << k.name;
    }
    EXPECT_EQ(projs, c.n_layer) << print_schedule(s);
    const Schedule plain = schedule(run_passes(captured, mlp_options(true)));
    EXPECT_EQ(plain.kernels.size(), s.kernels.size() + static_cast<size_t>(c.n_layer)) << "one launch fewer per block";
  }
  PassOptions no_ln = mlp_options(false);
  no_ln.fuse_mlp_proj = true;
  for (const Kernel& k : schedule(run_passes(capture_gpt(c, 2, 5), no_ln)).kernels) EXPECT_EQ(k.name.find("_proj_"), std::string::npos) << k.name;
}

// fuse_mlp_attention: each prefill attention joins the group of the MLP whose projection reads
// it (attention, projection, layernorm, fc1, fc2: a transformer block is the qkv GEMM and this
// kernel); its result is no longer materialised. The decode step's attention (KV cache, a
// runtime position) stays a kernel of its own; without fuse_mlp_proj nothing joins.
TEST(CompileFuseMlp, ThePrefillAttentionJoinsBeforeTheProjection) {
  const ModelConfig c = compile_tiny_config();
  PassOptions opt = mlp_options(true);
  opt.fuse_mlp_proj = opt.fuse_mlp_attention = true;
  const Graph g = run_passes(capture_gpt(c, 2, 5), opt);
  const Schedule s = schedule(g);
  int blocks = 0;
  for (const Kernel& k : s.kernels) {
    if (k.name.find("_mlp_") == std::string::npos) continue;
    ASSERT_EQ(k.name.find("cpp_fused_attention_proj_layernorm_mlp_"), 0u) << k.name;
    ++blocks;
    EXPECT_EQ(k.kind, KernelKind::PrologueMatmul) << k.name;
    const Node& a = g.nodes[static_cast<size_t>(k.nodes[0])];
    const Node& p = g.nodes[static_cast<size_t>(k.nodes[1])];
    ASSERT_EQ(a.op, Op::Attention) << k.name;
    ASSERT_EQ(p.op, Op::Matmul) << k.name;
    EXPECT_EQ(p.inputs[0], a.output) << "the projection reads the attention";
    EXPECT_FALSE(g.tensor(a.output).materialized) << "the attention's rows live in the kernel's shared memory";
    const MlpParts parts = mlp_parts(g, k);
    EXPECT_TRUE(parts.mlp && parts.proj && parts.attention) << k.name;
    EXPECT_FALSE(g.tensor(p.output).materialized);
    EXPECT_EQ(k.cols, c.d_model);
  }
  EXPECT_EQ(blocks, c.n_layer) << print_schedule(s);
  for (const Kernel& k : s.kernels) EXPECT_NE(k.kind, KernelKind::Attention) << k.name;
  PassOptions proj = mlp_options(true);
  proj.fuse_mlp_proj = true;
  EXPECT_EQ(schedule(run_passes(capture_gpt(c, 2, 5), proj)).kernels.size(), s.kernels.size() + static_cast<size_t>(c.n_layer))
      << "one launch fewer per block";
  // the decode step: the attention reads the KV cache, it stays apart
  const Schedule d = schedule(run_passes(capture_gpt_decode(c), opt));
  int attention = 0;
  for (const Kernel& k : d.kernels) {
    attention += k.kind == KernelKind::Attention;
    EXPECT_EQ(k.name.find("_attention_proj_"), std::string::npos) << k.name;
  }
  EXPECT_EQ(attention, c.n_layer) << print_schedule(d);
  // without the projection in the group the attention has nothing to join
  PassOptions no_proj = mlp_options(true);
  no_proj.fuse_mlp_attention = true;
  for (const Kernel& k : schedule(run_passes(capture_gpt(c, 2, 5), no_proj)).kernels)
    EXPECT_EQ(k.name.find("_attention_proj_"), std::string::npos) << k.name;
}

// fuse_mlp_next (REPORT 7n): the next block's layernorm (ln1) and qkv matmul join every MLP group
// but the last (its y is read by ln_f alone: no other reader would keep it stored, so mlp_next
// refuses; the LM head stays apart); y stays stored (the next block's residual reads it), the
// layernorm's rows do not; one kernel fewer per joined block; mlp_parts finds fc1 and fc2 before
// the tail.
TEST(CompileFuseMlp, TheNextLayerNormAndQkvJoinTheMlp) {
  const ModelConfig c = compile_tiny_config();
  for (bool decode : {false, true}) {
    SCOPED_TRACE(decode ? "decode step" : "forward (2, 5)");
    const Graph captured = decode ? capture_gpt_decode(c) : capture_gpt(c, 2, 5);
    PassOptions proj = mlp_options(true);
    proj.fuse_mlp_proj = true;
    PassOptions next = proj;
    next.fuse_mlp_next = true;
    const Schedule before = schedule(run_passes(captured, proj));
    const Graph g = run_passes(captured, next);  // verified after every pass
    const Schedule s = schedule(g);
    int tails = 0;
    for (const Kernel& k : s.kernels) {
      const MlpParts parts = mlp_parts(g, k);
      if (!parts.next) continue;
      ++tails;
      EXPECT_NE(k.name.find("_mlp_next_"), std::string::npos) << k.name;
      const Node& fc1 = g.nodes[static_cast<size_t>(k.nodes[parts.fc1])];
      const Node& fc2 = g.nodes[static_cast<size_t>(k.nodes[parts.fc1 + 1])];
      const Node& qkv = g.nodes[static_cast<size_t>(k.nodes.back())];
      EXPECT_EQ(fc1.op, Op::Matmul);
      EXPECT_EQ(fc2.inputs[0], fc1.output);
      EXPECT_TRUE(parts.proj);
      EXPECT_TRUE(g.tensor(fc2.output).materialized) << "y: the next block's residual";
      EXPECT_FALSE(g.tensor(qkv.inputs[0]).materialized) << "the layernorm's rows live in the kernel's shared memory";
      EXPECT_TRUE(g.tensor(qkv.output).materialized);
      EXPECT_EQ(g.tensor(qkv.output).cols(), 3 * c.d_model) << "the qkv projection";
    }
    EXPECT_EQ(tails, c.n_layer - 1) << print_schedule(s);
    EXPECT_EQ(s.kernels.size() + static_cast<size_t>(tails), before.kernels.size());
  }
  // off without the projection in the group (lower_cuda asks for both)
  PassOptions no_proj = mlp_options(true);
  no_proj.fuse_mlp_next = true;
  const Graph g = run_passes(capture_gpt(c, 2, 5), no_proj);
  for (const Kernel& k : schedule(g).kernels) EXPECT_FALSE(mlp_parts(g, k).next) << k.name;
}
