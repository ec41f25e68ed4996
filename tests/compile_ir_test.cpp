// The compiler's IR, builder, capture, printer and verifier (compile/ir.h, compile/capture.h):
// graphs built by hand and captured from the model verify; broken graphs are caught with a
// message naming the problem.
#include "compile/capture.h"
#include "compile/ir.h"
#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include "compile_test_config.h"

#include <gtest/gtest.h>

#include <string>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

ModelConfig tiny_config() { return compile_tiny_config(); }

// The message of the Error fn throws ("" if none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CompileIr, TinyHeadIsSixLinesAndPrintsReadably) {
  const Graph g = capture_tinyhead(2);
  ASSERT_EQ(g.nodes.size(), 3u);  // matmul, bias_add, softmax
  EXPECT_EQ(g.nodes[0].op, Op::Matmul);
  EXPECT_EQ(g.nodes[2].op, Op::Softmax);
  const std::string text = print_graph(g, "capture");
  EXPECT_NE(text.find("input 'x' f32 (2, 64)"), std::string::npos) << text;
  EXPECT_NE(text.find("weight 'fc.weight' f32 (600, 64)"), std::string::npos) << text;
  EXPECT_NE(text.find("softmax(%"), std::string::npos) << text;
  EXPECT_NE(text.find("# softmax (cpu::softmax)"), std::string::npos) << text;
}

TEST(CompileIr, OpGroupsAreDisjointWhereTheyMustBe) {
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    EXPECT_FALSE(kPointwise.contains(op) && kReduction.contains(op)) << op_name(op);
    EXPECT_FALSE(kMatmul.contains(op) && kRowwise.contains(op)) << op_name(op);
    EXPECT_FALSE(op_name(op).empty());
  }
  EXPECT_TRUE(kPointwise.contains(Op::Exp));
  EXPECT_TRUE(kReduction.contains(Op::ReduceSum));
  EXPECT_TRUE(kComposite.contains(Op::LayerNorm));
}

TEST(CompileIr, CapturesTheModelAndItsDecodeStep) {
  const ModelConfig c = tiny_config();
  const Graph g = capture_gpt(c, 2, 5);
  int layernorms = 0, matmuls = 0, scores = 0;
  for (const Node& n : g.nodes) {
    layernorms += n.op == Op::LayerNorm;
    matmuls += n.op == Op::Matmul;
    scores += n.op == Op::AttnScores;
  }
  EXPECT_EQ(layernorms, 2 * c.n_layer + 1);
  EXPECT_EQ(matmuls, 4 * c.n_layer + 1);
  EXPECT_EQ(scores, c.n_layer);
  EXPECT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.tensor(g.outputs[0]).shape, (std::vector<int64_t>{2, 5, 50}));
  const std::string text = print_graph(g, "capture");
  EXPECT_NE(text.find("blocks.1.ln2 (cpu::layernorm_forward)"), std::string::npos);
  EXPECT_NE(text.find("'blocks.0.attn.qkv.weight'"), std::string::npos);

  const Graph d = capture_gpt_decode(c, 3);  // t a constant
  EXPECT_EQ(d.inputs.size(), 1u + 2u * static_cast<size_t>(c.n_layer));
  int writes = 0;
  for (const Node& n : d.nodes) writes += n.op == Op::KvWrite;
  EXPECT_EQ(writes, 2 * c.n_layer);
  EXPECT_THROW(capture_gpt_decode(c, c.block_size), Error);
  // t read at run time: one more input "pos" (1) i32, read by the embedding, every KV write
  // and every attention; its bound is the caches' rows; the text names it, never a number
  const Graph r = capture_gpt_decode(c);
  ASSERT_EQ(r.inputs.size(), 2u + 2u * static_cast<size_t>(c.n_layer));
  const int pos = r.inputs[1];
  EXPECT_EQ(r.tensor(pos).name, "pos");
  int readers = 0;
  for (const Node& n : r.nodes) readers += position_input(n) == pos;
  EXPECT_EQ(readers, 1 + 3 * c.n_layer);
  EXPECT_EQ(position_capacity(r, pos), c.block_size);
  const std::string rt = print_graph(r, "capture");
  EXPECT_NE(rt.find(fmt::format("row=%{}", pos)), std::string::npos) << rt;
  EXPECT_NE(rt.find(fmt::format("offset=%{}", pos)), std::string::npos);
  EXPECT_NE(graph_hash(r), graph_hash(d));
  EXPECT_THROW(capture_gpt(c, 1, c.block_size + 1), Error);
}

TEST(CompileIr, VerifierCatchesBrokenGraphs) {
  const Graph good = capture_tinyhead(2);
  EXPECT_NO_THROW(verify(good, "test"));
  {  // a node reading a tensor nothing wrote
    Graph g = good;
    TensorInfo t;
    t.name = "ghost";
    t.shape = {2, 600};
    const int ghost = g.add_tensor(t);
    g.nodes[2].inputs[0] = ghost;
    EXPECT_NE(error_of([&] { verify(g, "test"); }).find("before anything writes it"), std::string::npos);
  }
  {  // shape mismatch: bias of the wrong length
    Graph g = good;
    g.tensor(g.weights[1]).shape = {599};
    EXPECT_NE(error_of([&] { verify(g, "test"); }).find("does not match"), std::string::npos);
  }
  {  // a dangling node: its result reaches no output
    Graph g = good;
    GraphBuilder b("x");
    b.graph() = g;
    b.unary(Op::Exp, g.nodes[1].output, "unused", "test");
    EXPECT_NE(error_of([&] { verify(b.graph(), "test"); }).find("dangling"), std::string::npos);
    EXPECT_NO_THROW(verify(remove_dead(b.graph()), "remove_dead"));
  }
  {  // a tensor written twice
    Graph g = good;
    g.nodes[2].output = g.nodes[1].output;
    EXPECT_NE(error_of([&] { verify(g, "test"); }).find("written twice"), std::string::npos);
  }
  {  // an ids tensor used as data
    Graph g = capture_gpt(tiny_config(), 1, 4);
    for (Node& n : g.nodes)
      if (n.op == Op::PosEmbedding) {
        n.op = Op::Exp;
        n.inputs = {g.inputs[0]};
      }
    EXPECT_NE(error_of([&] { verify(g, "test"); }).find("i32 tensor"), std::string::npos);
  }
  {  // a value fused away but read by another kernel
    Graph g = run_passes(capture_tinyhead(2));
    for (Node& n : g.nodes)
      if (n.op == Op::Exp) {
        n.group = 0;  // moved out of the softmax kernel, still reading the unstored max
      }
    EXPECT_NE(error_of([&] { verify(g, "test"); }), "");
  }
  {  // two live tensors placed on the same arena bytes
    Graph g = run_passes(capture_gpt(tiny_config(), 1, 4));
    int a = -1, b = -1;  // a kernel's planned input and its planned output: live together
    for (const Node& n : g.nodes) {
      if (b >= 0 || g.tensor(n.output).arena_offset < 0) continue;
      for (int in : n.inputs)
        if (g.tensor(in).arena_offset >= 0) {
          a = in;
          b = n.output;
        }
    }
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    g.tensor(a).arena_offset = 0;
    g.tensor(b).arena_offset = 0;
    const std::string e = error_of([&] { verify(g, "test"); });
    EXPECT_NE(e.find("share arena bytes"), std::string::npos) << e << a << " " << b;
  }
}

TEST(CompileIr, VerifierChecksRuntimePositions) {
  ModelConfig c;
  c.n_layer = 1;
  c.vocab_size = 30;
  c.block_size = 8;
  const Graph good = capture_gpt_decode(c);
  EXPECT_NO_THROW(verify(good, "test"));
  auto first = [](const Graph& g, Op op) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op == op) return i;
    return g.nodes.size();
  };
  {  // the position read from a float cache instead of the (1) i32 input
    Graph g = good;
    Node& n = g.nodes[first(g, Op::KvWrite)];
    n.inputs.back() = g.inputs[2];
    EXPECT_THROW(verify(g, "test"), Error);
  }
  {  // a runtime offset on an op that cannot take one
    Graph g = good;
    Node& n = g.nodes[first(g, Op::Matmul)];
    n.runtime_offset = true;
    n.inputs.push_back(g.inputs[1]);
    EXPECT_THROW(verify(g, "test"), Error);
  }
  {  // both a constant and a runtime offset
    Graph g = good;
    g.nodes[first(g, Op::Attention)].offset = 2;
    EXPECT_THROW(verify(g, "test"), Error);
  }
}

TEST(CompileIr, HashFollowsStructureAndShapes) {
  EXPECT_EQ(graph_hash(capture_tinyhead(2)), graph_hash(capture_tinyhead(2)));
  EXPECT_NE(graph_hash(capture_tinyhead(2)), graph_hash(capture_tinyhead(3)));
}
