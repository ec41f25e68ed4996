// fuse_pointwise: chains of pointwise ops (and the gathers feeding them) merged into one group
// wherever producer and consumer iterate over the same (rows, columns) space and the merge
// keeps the kernels acyclic (passes.h). Inductor's rule for pointwise nodes: one loop nest,
// values passed in registers. Every node starts in a group of its own.
#include "compile/passes/passes.h"

namespace minigpt::compile {

namespace {

constexpr OpSet kLoopOps{Op::Embedding, Op::PosEmbedding, Op::Add,       Op::Sub,
                         Op::Mul,       Op::Div,          Op::BiasAdd,   Op::AddScalar,
                         Op::MulScalar, Op::Exp,          Op::Rsqrt,     Op::Gelu};

bool same_space(const TensorInfo& a, const TensorInfo& b) {
  return a.cols() == b.cols() && a.rows() == b.rows();
}

}  // namespace

Graph fuse_pointwise(Graph g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) g.nodes[i].group = static_cast<int>(i);
  const NodeUsers users(g);  // (only groups change below)
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    if (!kLoopOps.contains(g.nodes[c].op)) continue;
    for (int in : g.nodes[c].inputs) {
      const int p = g.tensor(in).producer;
      if (p < 0 || !kLoopOps.contains(g.nodes[static_cast<size_t>(p)].op)) continue;
      if (!same_space(g.tensor(in), g.tensor(g.nodes[c].output))) continue;
      const int gp = g.nodes[static_cast<size_t>(p)].group, gc = g.nodes[c].group;
      if (gp == gc || !can_merge(g, gp, gc, users)) continue;
      for (Node& n : g.nodes)
        if (n.group == gc) n.group = gp;
    }
  }
  normalize_groups(g);
  return g;
}

}  // namespace minigpt::compile
