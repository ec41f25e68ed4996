// matmul_prologue: the group that computes a matmul's x merged into the matmul, as the GEMM's
// prologue (passes.h): a row-wise group (a layernorm, with an embedding or a residual add before
// it), or a prefill's attention (before the output projection). Opt-in per back end
// (PassOptions::matmul_prologue): the CUDA back end's generated GEMM computes its tile's rows of
// x in shared memory before its K loop (the rows are the GEMM's K wide, a few hundred floats at
// most), so x is never stored and one launch goes; the C++ back end has no such kernel and
// keeps those kernels as they are.
//
//   group P (R rows of K columns) -> x (R, K) -> matmul(x, W ...)   => one group
//
// only where x has that one reader and is not a graph output, K <= kPrologueMaxCols, P is
// row-wise over x's rows and columns (R, K) or an attention over its own qkv (no KV cache, no
// offset; heads of at most kPrologueMaxHeadDim, at most kPrologueMaxKeys keys), the matmul reads
// nothing else that P
// writes (a tile's other CTAs may still be writing it), and the merge keeps the kernels acyclic.
// Outputs of P read elsewhere (the residual stream after an embedding) stay materialised: the
// fused kernel stores them. The merged group is P's nodes then the matmul (schedule.h's
// KernelKind::PrologueMatmul). A decode step's attention (KV cache, runtime position) stays a
// kernel of its own.
#include "compile/passes/passes.h"

namespace minigpt::compile {

namespace {

bool rowwise_only(const Graph& g, int group) {
  for (const Node& n : g.nodes)
    if (n.group == group && !kRowwise.contains(n.op)) return false;
  return true;
}

}  // namespace

Graph matmul_prologue(Graph g, bool rowwise, bool attention) {
  normalize_groups(g);  // every node in some group
  NodeUsers users(g);   // indexed again whenever the nodes move
  for (size_t i = 0; i < g.nodes.size(); ++i) {  // restarts after every merge (nodes move)
    const Node& mm = g.nodes[i];
    if (mm.op != Op::Matmul) continue;
    const int x = mm.inputs[0];
    const TensorInfo& xt = g.tensor(x);
    if (xt.producer < 0 || g.is_graph_output(x) || users.of(x).size() != 1) continue;
    const Node& pn = g.nodes[static_cast<size_t>(xt.producer)];
    const int pg = pn.group;
    if (pg == mm.group || xt.cols() > kPrologueMaxCols) continue;
    if (pn.op == Op::Attention) {
      // a prefill's attention (keys from its own qkv rows), alone in its group
      const auto& qkv = g.tensor(pn.inputs[0]).shape;  // (B, T, 3C)
      if (!attention || data_inputs(pn) != 1 || pn.runtime_offset || pn.offset != 0 || qkv[2] / 3 / pn.heads > kPrologueMaxHeadDim ||
          qkv[1] > kPrologueMaxKeys)
        continue;
    } else {
      const RowSpace rs = row_space(g, pg);
      if (!rowwise || !rowwise_only(g, pg) || rs.rows != xt.rows() || rs.cols != xt.cols()) continue;
    }
    bool reads_p = false;  // another input of the matmul written by P
    for (size_t a = 1; a < mm.inputs.size(); ++a) {
      const int p = g.tensor(mm.inputs[a]).producer;
      reads_p |= p >= 0 && g.nodes[static_cast<size_t>(p)].group == pg;
    }
    if (reads_p || !can_merge(g, pg, mm.group, users)) continue;
    const int from = mm.group;
    for (Node& n : g.nodes)
      if (n.group == from) n.group = pg;
    normalize_groups(g);  // the matmul follows P's nodes; x is no longer materialised
    users = NodeUsers(g);
    i = static_cast<size_t>(-1);
  }
  return g;
}

}  // namespace minigpt::compile
