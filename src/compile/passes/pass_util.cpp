// Helpers the passes share (passes.h): producer bookkeeping, group normalisation, the
// merge-legality test and a group's iteration space.
#include "compile/passes/passes.h"

#include "core/error.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <queue>
#include <set>
#include <utility>

namespace minigpt::compile {

NodeUsers::NodeUsers(const Graph& g) : start_(g.tensors.size() + 1, 0) {
  // counting sort of (tensor, node) pairs by tensor; a node reading a tensor twice counts once
  auto each_read = [&](auto&& f) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const std::vector<int>& in = g.nodes[i].inputs;
      for (size_t a = 0; a < in.size(); ++a)
        if (std::find(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(a), in[a]) == in.begin() + static_cast<std::ptrdiff_t>(a))
          f(static_cast<size_t>(in[a]), static_cast<int>(i));
    }
  };
  each_read([&](size_t t, int) { ++start_[t + 1]; });
  for (size_t t = 1; t < start_.size(); ++t) start_[t] += start_[t - 1];
  nodes_.resize(start_.back());
  std::vector<size_t> at(start_.begin(), start_.end() - 1);
  each_read([&](size_t t, int i) { nodes_[at[t]++] = i; });
}

void reindex(Graph& g) {
  for (TensorInfo& t : g.tensors) t.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) g.tensor(g.nodes[i].output).producer = static_cast<int>(i);
}

namespace {

// For every group, the groups it reads from.
std::vector<std::set<int>> group_deps(const Graph& g, int ngroups) {
  std::vector<std::set<int>> deps(static_cast<size_t>(ngroups));
  for (const Node& n : g.nodes) {
    for (int in : n.inputs) {
      const int p = g.tensor(in).producer;
      if (p < 0) continue;
      const int pg = g.nodes[static_cast<size_t>(p)].group;
      if (pg != n.group) deps[static_cast<size_t>(n.group)].insert(pg);
    }
  }
  return deps;
}

}  // namespace

void normalize_groups(Graph& g) {
  reindex(g);
  int ng = 0;
  for (const Node& n : g.nodes) ng = std::max(ng, n.group + 1);
  for (Node& n : g.nodes)
    if (n.group < 0) n.group = ng++;
  // Kahn over groups, ties broken by the group's first node (keeps the capture's order).
  std::vector<int> first(static_cast<size_t>(ng), INT32_MAX);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    int& f = first[static_cast<size_t>(g.nodes[i].group)];
    f = std::min(f, static_cast<int>(i));
  }
  const auto deps = group_deps(g, ng);
  std::vector<int> indeg(static_cast<size_t>(ng), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(ng));
  for (int v = 0; v < ng; ++v) {
    for (int d : deps[static_cast<size_t>(v)]) {
      ++indeg[static_cast<size_t>(v)];
      users[static_cast<size_t>(d)].push_back(v);
    }
  }
  using Item = std::pair<int, int>;  // (first node, group)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (int v = 0; v < ng; ++v)
    if (first[static_cast<size_t>(v)] != INT32_MAX && indeg[static_cast<size_t>(v)] == 0) ready.push({first[static_cast<size_t>(v)], v});
  std::vector<int> rank(static_cast<size_t>(ng), -1);
  int next = 0;
  while (!ready.empty()) {
    const int v = ready.top().second;
    ready.pop();
    rank[static_cast<size_t>(v)] = next++;
    for (int u : users[static_cast<size_t>(v)])
      if (--indeg[static_cast<size_t>(u)] == 0) ready.push({first[static_cast<size_t>(u)], u});
  }
  for (const Node& n : g.nodes)
    MINIGPT_CHECK(rank[static_cast<size_t>(n.group)] >= 0, "normalize_groups: the fused groups form a cycle (group {})", n.group);
  std::vector<size_t> order(g.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rank[static_cast<size_t>(g.nodes[a].group)] < rank[static_cast<size_t>(g.nodes[b].group)];
  });
  std::vector<Node> nodes;
  nodes.reserve(order.size());
  for (size_t i : order) {  // (a permutation: each node moved once)
    const int group = rank[static_cast<size_t>(g.nodes[i].group)];
    nodes.push_back(std::move(g.nodes[i]));
    nodes.back().group = group;
  }
  g.nodes = std::move(nodes);
  reindex(g);
  // materialised: read outside the producer's group, or a graph output, or in place
  for (TensorInfo& t : g.tensors) t.materialized = true;
  const NodeUsers readers_of(g);  // (Graph::consumers per node was O(nodes^2), ~1 ms a call)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int out = g.nodes[i].output;
    TensorInfo& t = g.tensor(out);
    if (g.is_graph_output(out) || t.alias_of >= 0) continue;
    const std::span<const int> readers = readers_of.of(out);
    bool outside = false, gemm_x = !readers.empty();
    for (int c : readers) {
      const Node& cn = g.nodes[static_cast<size_t>(c)];
      outside |= cn.group != g.nodes[i].group;
      gemm_x &= cn.op == Op::Matmul && cn.inputs[0] == out;
    }
    // Only rowwise groups can keep a value in registers; other kernels store their result,
    // except an attention (matmul_prologue) whose reader in its group is a GEMM (the GEMM's x
    // lives in its shared memory) and a matmul read only inside its group (fuse_mlp: an MLP's
    // h, or the projection its layernorm and fc2's residual read, in shared memory).
    const Op op = g.nodes[i].op;
    t.materialized = outside || !(kRowwise.contains(op) || (op == Op::Attention && gemm_x) || (op == Op::Matmul && !readers.empty()));
  }
}

bool can_merge(const Graph& g, int a, int b) { return can_merge(g, a, b, NodeUsers(g)); }

bool can_merge(const Graph& g, int a, int b, const NodeUsers& users) {
  // Forward closure from the members of a and b through nodes of other groups; if a node
  // outside that is reached from inside feeds a member, a path leaves the merged group and
  // comes back: merging would make a cycle.
  const size_t n = g.nodes.size();
  auto member = [&](size_t i) { return g.nodes[i].group == a || g.nodes[i].group == b; };
  std::vector<char> seen(n, 0);
  std::vector<int> stack;
  for (size_t i = 0; i < n; ++i)
    if (member(i))
      for (int c : users.of(g.nodes[i].output))
        if (!member(static_cast<size_t>(c))) stack.push_back(c);
  while (!stack.empty()) {
    const size_t v = static_cast<size_t>(stack.back());
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = 1;
    for (int c : users.of(g.nodes[v].output)) {
      if (member(static_cast<size_t>(c))) return false;
      stack.push_back(c);
    }
  }
  return true;
}

RowSpace row_space(const Graph& g, int group) {
  RowSpace r;
  for (const Node& n : g.nodes) {
    if (n.group != group) continue;
    auto consider = [&](const TensorInfo& t) {
      if (t.cols() > r.cols || (t.cols() == r.cols && t.rows() > r.rows)) r = {t.rows(), t.cols()};
    };
    consider(g.tensor(n.output));
    for (int in : n.inputs)
      if (g.tensor(in).kind != TensorKind::Weight && g.tensor(in).dtype == DType::F32) consider(g.tensor(in));
  }
  return r;
}

}  // namespace minigpt::compile
