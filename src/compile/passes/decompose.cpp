// decompose: composite ops into the pointwise and reduction pieces fusion regroups (passes.h).
//   softmax(x)           -> m = max(x); e = exp(x - m); y = e / sum(e)
//   layernorm(x, w, b)   -> mean = sum(x)/C; d = x - mean; var = sum(d*d)/C;
//                           y = d * rsqrt(var + eps) * w + b   (sums accumulated in double, as
//                           cpu::layernorm_forward: a constant row gives exactly 0, then + b)
// Every piece keeps the composite's source, so generated code still names the eager op.
#include "compile/passes/passes.h"

#include <fmt/format.h>

#include <utility>

namespace minigpt::compile {

namespace {

struct Emitter {
  Graph& g;
  std::vector<Node>& out;
  const Node& from;

  // A new node reading `inputs`; result of `shape` (or into `into` when >= 0).
  int emit(Op op, std::vector<int> inputs, std::vector<int64_t> shape, const std::string& suffix,
           int into = -1, float alpha = 0, bool acc_f64 = false) {
    if (into < 0) {
      TensorInfo t;
      t.name = g.tensor(from.output).name + "." + suffix;
      t.shape = std::move(shape);
      into = g.add_tensor(std::move(t));
    }
    Node n;
    n.op = op;
    n.inputs = std::move(inputs);
    n.output = into;
    n.source = from.source;
    n.origin = std::string(op_name(from.op));
    n.alpha = alpha;
    n.acc_f64 = acc_f64;
    out.push_back(std::move(n));
    return into;
  }
};

}  // namespace

Graph decompose(Graph g) {
  std::vector<Node> before = std::move(g.nodes);
  std::vector<Node> nodes;
  for (Node& n : before) {
    if (!kComposite.contains(n.op)) {
      nodes.push_back(std::move(n));  // kept as it is: moved, not copied
      continue;
    }
    Emitter e{g, nodes, n};
    const std::vector<int64_t> full = g.tensor(n.output).shape;
    std::vector<int64_t> row = full;
    row.back() = 1;
    const int x = n.inputs[0];
    if (n.op == Op::Softmax) {
      const int m = e.emit(Op::ReduceMax, {x}, row, "max");
      const int s = e.emit(Op::Sub, {x, m}, full, "sub");
      const int ex = e.emit(Op::Exp, {s}, full, "exp");
      const int z = e.emit(Op::ReduceSum, {ex}, row, "sum");
      e.emit(Op::Div, {ex, z}, full, "div", n.output);
    } else {  // LayerNorm
      const float inv_c = 1.0f / static_cast<float>(full.back());
      const int s1 = e.emit(Op::ReduceSum, {x}, row, "sum", -1, 0, true);
      const int mean = e.emit(Op::MulScalar, {s1}, row, "mean", -1, inv_c);
      const int d = e.emit(Op::Sub, {x, mean}, full, "centered");
      const int sq = e.emit(Op::Mul, {d, d}, full, "square");
      const int s2 = e.emit(Op::ReduceSum, {sq}, row, "sumsq", -1, 0, true);
      const int var = e.emit(Op::MulScalar, {s2}, row, "var", -1, inv_c);
      const int ve = e.emit(Op::AddScalar, {var}, row, "var_eps", -1, n.alpha);
      const int rstd = e.emit(Op::Rsqrt, {ve}, row, "rstd");
      const int xh = e.emit(Op::Mul, {d, rstd}, full, "normed");
      const int yw = e.emit(Op::Mul, {xh, n.inputs[1]}, full, "gain");
      e.emit(Op::Add, {yw, n.inputs[2]}, full, "shift", n.output);
    }
  }
  g.nodes = std::move(nodes);
  reindex(g);
  return g;
}

}  // namespace minigpt::compile
