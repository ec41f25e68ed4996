// fuse_reductions: reductions merged with their pointwise prologue and epilogue (passes.h).
//
// Two row-wise groups joined by an edge merge when one end of the edge is a reduction or works
// on one value per row (mean, rstd, ...), both groups iterate over the same rows, their column
// counts agree (or one side only has per-row values), and the merge keeps the kernels acyclic.
// So softmax's max, sub, exp, sum, div become one kernel (exp(x - max) is recomputed in the
// loop that needs it, never stored), a layernorm's two sums and its normalisation one kernel,
// and a residual add (or an embedding) before a layernorm joins it.
#include "compile/passes/passes.h"

namespace minigpt::compile {

namespace {

bool per_row(const TensorInfo& t) { return t.cols() == 1; }

bool rowwise_group(const Graph& g, int group) {
  for (const Node& n : g.nodes)
    if (n.group == group && !kRowwise.contains(n.op)) return false;
  return true;
}

bool compatible(const RowSpace& a, const RowSpace& b) {
  return a.rows == b.rows && (a.cols == b.cols || a.cols == 1 || b.cols == 1);
}

}  // namespace

Graph fuse_reductions(Graph g) {
  normalize_groups(g);  // every node in some group
  bool changed = true;
  while (changed) {
    changed = false;
    const NodeUsers users(g);  // (only groups change until normalize_groups)
    for (size_t c = 0; c < g.nodes.size(); ++c) {
      const Node& cn = g.nodes[c];
      for (int in : cn.inputs) {
        const int p = g.tensor(in).producer;
        if (p < 0) continue;
        const Node& pn = g.nodes[static_cast<size_t>(p)];
        if (pn.group == cn.group) continue;
        const bool reduction_edge = kReduction.contains(pn.op) || kReduction.contains(cn.op) ||
                                    per_row(g.tensor(pn.output)) || per_row(g.tensor(cn.output));
        if (!reduction_edge || !rowwise_group(g, pn.group) || !rowwise_group(g, cn.group)) continue;
        if (!compatible(row_space(g, pn.group), row_space(g, cn.group))) continue;
        if (!can_merge(g, pn.group, cn.group, users)) continue;
        const int from = cn.group, to = pn.group;
        for (Node& n : g.nodes)
          if (n.group == from) n.group = to;
        changed = true;
      }
    }
    if (changed) normalize_groups(g);
  }
  normalize_groups(g);
  return g;
}

}  // namespace minigpt::compile
