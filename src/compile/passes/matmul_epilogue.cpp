// matmul_epilogue: work after a matmul folded into its store (passes.h), as the engine's
// LinearEpilogue and Inductor's addmm epilogues do:
//   matmul(x, W) -> bias_add(., b)            => matmul(x, W, +bias)
//   matmul(...)  -> gelu(.)                    => matmul(..., gelu)
//   matmul(...)  -> add(., r) or add(r, .)     => matmul(..., +residual r)
// only where the matmul's result has that one reader and is not a graph output, and never
// GELU and a residual together (the GEMM's epilogue has one or the other). The fused node
// takes the reader's place in the order (all of its inputs are defined there).
#include "compile/passes/passes.h"

namespace minigpt::compile {

Graph matmul_epilogue(Graph g) {
  bool changed = true;
  while (changed) {
    changed = false;
    const NodeUsers users(g);  // for this scan: it stops at the first fusion
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node mm = g.nodes[i];
      if (mm.op != Op::Matmul || g.is_graph_output(mm.output)) continue;
      const std::span<const int> readers = users.of(mm.output);
      if (readers.size() != 1) continue;
      Node& user = g.nodes[static_cast<size_t>(readers[0])];
      Node fused = mm;
      if (user.op == Op::BiasAdd && !mm.has_bias && !mm.has_residual && !mm.gelu &&
          user.inputs[0] == mm.output && g.tensor(user.inputs[1]).kind == TensorKind::Weight) {
        fused.has_bias = true;
        fused.inputs = {mm.inputs[0], mm.inputs[1], user.inputs[1]};
      } else if (user.op == Op::Gelu && !mm.gelu && !mm.has_residual) {
        fused.gelu = true;
      } else if (user.op == Op::Add && !mm.gelu && !mm.has_residual &&
                 g.tensor(user.inputs[0]).shape == g.tensor(user.inputs[1]).shape &&
                 user.inputs[0] != user.inputs[1]) {
        fused.has_residual = true;
        fused.inputs.push_back(user.inputs[0] == mm.output ? user.inputs[1] : user.inputs[0]);
      } else {
        continue;
      }
      fused.output = user.output;
      fused.source = mm.source;
      fused.group = -1;
      user = fused;
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      reindex(g);
      changed = true;
    }
  }
  return g;
}

}  // namespace minigpt::compile
