// fuse_mlp: a transformer MLP's two matmuls as one group (passes.h), opt-in per back end
// (PassOptions::fuse_mlp): the CUDA back end's generated GEMM computes fc1's tile of h (with
// fc1's own row-wise prologue, the layernorm, when matmul_prologue put one there) into shared
// memory and fc2's K loop reads it there, so h is never stored and one launch goes. The C++ back
// end has no such kernel and never sets the option.
//
//   group A = [row-wise prologue nodes...,] matmul A (bias, GELU; no residual) -> h (R, H)
//   group B = matmul B (h, W2 ...)                                             => one group
//
// only where h has that one reader (B's x) and is not a graph output, H <= kMlpMaxHidden (a
// tile's rows of h live in shared memory), A's x at most kMlpMaxIn wide, A is the last node of
// its group and every other node of it is row-wise, B is alone in its group, B reads nothing
// else that group A writes, and the merge keeps the kernels acyclic. The merged group is A's
// nodes then B (schedule.h: a PrologueMatmul whose prologue ends in a matmul).
//
// With `proj` (fuse_mlp_proj), then the matmul P before it (a transformer block's attention
// projection, with its residual epilogue) when the MLP's row-wise prologue (the layernorm) reads
// P's result, every reader of that result is in the MLP's group (the layernorm and fc2's residual),
// it is not a graph output, P is alone in its group, its x at most kMlpMaxIn wide and the merge
// keeps the kernels acyclic: the group is P, the layernorm's nodes, A, B; P's result is no
// longer materialised (plan_buffers' rule: a matmul read only inside its group).
//
// With `attention` too (fuse_mlp_attention), then the attention A before such a P: a prefill's
// (keys from its own qkv rows, no KV cache, offset 0) alone in its group, its heads at most
// kPrologueMaxHeadDim wide and its keys at most kPrologueMaxKeys, its result read by P alone and
// not a graph output, the merge keeping the kernels acyclic: the group is A, P, the layernorm's
// nodes, fc1, fc2; A's result is no longer materialised (plan_buffers' rule: an attention whose
// reader in its group is a GEMM's x). A transformer block is then two kernels.
//
// With `next` (fuse_mlp_next, CUDA's cluster form only), last, the next block's layernorm and the
// matmul it feeds (qkv) after fc2 (mlp_next): the group ends P, ln2, fc1, fc2, ln1', qkv'; fc2's
// result stays stored (the next block's residual reads it).
#include "compile/passes/passes.h"

namespace minigpt::compile {

namespace {

// The nodes of group `gi`, in order.
std::vector<int> members(const Graph& g, int gi) {
  std::vector<int> out;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].group == gi) out.push_back(static_cast<int>(i));
  return out;
}

}  // namespace

// The projection P that MLP group `gi` (a row-wise prologue, fc1, fc2) may take in first, or -1.
int mlp_proj(const Graph& g, int gi) {
  const std::vector<int> m = members(g, gi);
  if (m.size() < 3 || !kRowwise.contains(g.nodes[static_cast<size_t>(m[0])].op)) return -1;
  int found = -1;
  for (size_t i = 0; i + 2 < m.size(); ++i) {  // the prologue's inputs made by a matmul of another group
    for (int in : g.nodes[static_cast<size_t>(m[i])].inputs) {
      const int p = g.tensor(in).producer;
      if (p < 0 || g.nodes[static_cast<size_t>(p)].group == gi || g.nodes[static_cast<size_t>(p)].op != Op::Matmul) continue;
      if (found >= 0 && found != p) return -1;  // two matmuls feed it: not a block's layout
      found = p;
    }
  }
  if (found < 0) return -1;
  const Node& pn = g.nodes[static_cast<size_t>(found)];
  if (g.is_graph_output(pn.output) || members(g, pn.group).size() != 1 || g.tensor(pn.inputs[0]).cols() > kMlpMaxIn) return -1;
  for (int c : g.consumers(pn.output))
    if (g.nodes[static_cast<size_t>(c)].group != gi) return -1;
  return can_merge(g, pn.group, gi) ? found : -1;
}

// The attention A that MLP group `gi`, with its projection P first, may take in before P, or -1.
int mlp_attention(const Graph& g, int gi) {
  const std::vector<int> m = members(g, gi);
  if (m.size() < 4 || g.nodes[static_cast<size_t>(m[0])].op != Op::Matmul) return -1;
  const int x = g.nodes[static_cast<size_t>(m[0])].inputs[0];  // P's x
  const int p = g.tensor(x).producer;
  if (p < 0 || g.is_graph_output(x) || g.consumers(x).size() != 1) return -1;
  const Node& an = g.nodes[static_cast<size_t>(p)];
  if (an.op != Op::Attention || members(g, an.group).size() != 1) return -1;
  const auto& qkv = g.tensor(an.inputs[0]).shape;  // (B, T, 3C)
  if (data_inputs(an) != 1 || an.runtime_offset || an.offset != 0 || qkv[2] / 3 / an.heads > kPrologueMaxHeadDim ||
      qkv[1] > kPrologueMaxKeys)
    return -1;
  return can_merge(g, an.group, gi) ? p : -1;
}

// Into every MLP group (found from its fc2, the second of two matmuls of one group), the group of
// the node `pick(g, group)` names (-1: none); the merged group's nodes in graph order, so the
// picked node's group first. Restarts after every merge (nodes move).
void merge_before_mlps(Graph& g, int (*pick)(const Graph&, int)) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& b = g.nodes[i];
    if (b.op != Op::Matmul || i < 2 || g.nodes[i - 1].op != Op::Matmul || g.nodes[i - 1].group != b.group) continue;
    const int p = pick(g, b.group);
    if (p < 0) continue;
    const int from = g.nodes[static_cast<size_t>(p)].group, to = b.group;
    for (Node& n : g.nodes)
      if (n.group == from) n.group = to;
    normalize_groups(g);
    i = static_cast<size_t>(-1);
  }
}

// The group after MLP group `gi` (its last node fc2) that fuse_mlp_next may take in, or -1: the
// next block's layernorm and the matmul it feeds (row-wise nodes, then one matmul without a
// residual or GELU, at most kMlpMaxNextCols columns), whose row-wise nodes read only fc2's result y
// and weights, y also read by a third group (so still stored: the next block's residual), the
// merge keeping the kernels acyclic.
int mlp_next(const Graph& g, int gi) {
  const std::vector<int> m = members(g, gi);
  const Node& fc2 = g.nodes[static_cast<size_t>(m.back())];
  if (m.size() < 2 || fc2.op != Op::Matmul || g.nodes[static_cast<size_t>(m[m.size() - 2])].op != Op::Matmul) return -1;
  const int y = fc2.output;
  int next = -1;
  bool elsewhere = false;
  for (int c : g.consumers(y)) {
    const Node& cn = g.nodes[static_cast<size_t>(c)];
    if (!kRowwise.contains(cn.op)) elsewhere = true;
    else if (next < 0 || next == cn.group) next = cn.group;
    else elsewhere = true;
  }
  if (next < 0 || !elsewhere) return -1;
  const std::vector<int> n = members(g, next);
  const Node& mm = g.nodes[static_cast<size_t>(n.back())];
  if (n.size() < 2 || mm.op != Op::Matmul || mm.has_residual || mm.gelu || g.tensor(mm.output).cols() > kMlpMaxNextCols) return -1;
  for (size_t i = 0; i + 1 < n.size(); ++i) {
    const Node& r = g.nodes[static_cast<size_t>(n[i])];
    if (!kRowwise.contains(r.op)) return -1;
    for (int in : r.inputs) {
      const int p = g.tensor(in).producer;
      if (in != y && (p < 0 ? g.tensor(in).kind != TensorKind::Weight : g.nodes[static_cast<size_t>(p)].group != next)) return -1;
    }
  }
  return can_merge(g, gi, next) ? next : -1;
}

Graph fuse_mlp(Graph g, bool proj, bool attention, bool next) {
  normalize_groups(g);  // every node in some group
  for (size_t i = 0; i < g.nodes.size(); ++i) {  // restarts after every merge (nodes move)
    const Node& b = g.nodes[i];
    if (b.op != Op::Matmul) continue;
    const int h = b.inputs[0];
    const TensorInfo& ht = g.tensor(h);
    if (ht.producer < 0 || g.is_graph_output(h) || g.consumers(h).size() != 1 || ht.cols() > kMlpMaxHidden) continue;
    const Node& a = g.nodes[static_cast<size_t>(ht.producer)];
    if (a.op != Op::Matmul || a.has_residual || a.group == b.group || g.tensor(a.inputs[0]).cols() > kMlpMaxIn) continue;
    const std::vector<int> ga = members(g, a.group), gb = members(g, b.group);
    if (gb.size() != 1 || ga.back() != ht.producer) continue;
    bool rowwise = true;  // A's prologue: row-wise nodes only
    for (size_t m = 0; m + 1 < ga.size(); ++m) rowwise &= kRowwise.contains(g.nodes[static_cast<size_t>(ga[m])].op);
    if (!rowwise) continue;
    bool reads_a = false;  // another input of B written by group A
    for (size_t k = 1; k < b.inputs.size(); ++k) {
      const int p = g.tensor(b.inputs[k]).producer;
      reads_a |= p >= 0 && g.nodes[static_cast<size_t>(p)].group == a.group;
    }
    if (reads_a || !can_merge(g, a.group, b.group)) continue;
    const int from = b.group, to = a.group;
    for (Node& n : g.nodes)
      if (n.group == from) n.group = to;
    normalize_groups(g);  // B follows A's nodes; h is no longer materialised
    i = static_cast<size_t>(-1);
  }
  if (proj) merge_before_mlps(g, mlp_proj);  // P first, then the layernorm, fc1, fc2
  if (proj && attention) merge_before_mlps(g, mlp_attention);  // the attention first, then P, ...
  if (next) {  // the next block's layernorm and qkv after fc2 (fuse_mlp_next); restarts after every merge
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& b = g.nodes[i];
      if (b.op != Op::Matmul || i < 1 || g.nodes[i - 1].op != Op::Matmul || g.nodes[i - 1].group != b.group) continue;
      const int to = b.group, from = mlp_next(g, to);
      if (from < 0) continue;
      for (Node& n : g.nodes)
        if (n.group == from) n.group = to;
      normalize_groups(g);
      i = static_cast<size_t>(-1);
    }
  }
  return g;
}

}  // namespace minigpt::compile
