// fuse_attention: the attention pieces of one layer -> one attention op (passes.h).
//
// Matches, for a qkv tensor (B, T, 3C):
//   q, k, v = split_heads(qkv); s = attn_scores(q, k); s = mul_scalar(s, 1/sqrt(dh));
//   s = causal_mask(s); p = softmax(s); o = weighted_sum(p, v); out = merge_heads(o)
// with every intermediate read only by the next piece, and replaces the chain by
// attention(qkv) -> out. The code generator gives that op one loop nest per (batch, head):
// scores for a block of keys, running max and sum (online softmax, as FlashAttention), and
// the weighted sum, so the (B, NH, T, T) score and probability tensors never exist.
#include "compile/passes/passes.h"

#include <cmath>

namespace minigpt::compile {

namespace {

// The node producing t if it is `op` and t has exactly one reader; else -1.
int single_use_producer(const Graph& g, int t, Op op) {
  const int p = g.tensor(t).producer;
  if (p < 0 || g.nodes[static_cast<size_t>(p)].op != op) return -1;
  if (g.is_graph_output(t) || g.consumers(t).size() != 1) return -1;
  return p;
}

}  // namespace

Graph fuse_attention(Graph g) {
  std::vector<char> drop(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& merge = g.nodes[i];
    if (merge.op != Op::MergeHeads) continue;
    const int ws = single_use_producer(g, merge.inputs[0], Op::WeightedSum);
    if (ws < 0) continue;
    const Node& wsn = g.nodes[static_cast<size_t>(ws)];
    const int sm = single_use_producer(g, wsn.inputs[0], Op::Softmax);
    const int vs = single_use_producer(g, wsn.inputs[1], Op::SplitHeads);
    if (sm < 0 || vs < 0) continue;
    const int mask = single_use_producer(g, g.nodes[static_cast<size_t>(sm)].inputs[0], Op::CausalMask);
    if (mask < 0) continue;
    const int scale = single_use_producer(g, g.nodes[static_cast<size_t>(mask)].inputs[0], Op::MulScalar);
    if (scale < 0) continue;
    const int sc = single_use_producer(g, g.nodes[static_cast<size_t>(scale)].inputs[0], Op::AttnScores);
    if (sc < 0) continue;
    const Node& scn = g.nodes[static_cast<size_t>(sc)];
    const int qs = single_use_producer(g, scn.inputs[0], Op::SplitHeads);
    const int ks = single_use_producer(g, scn.inputs[1], Op::SplitHeads);
    if (qs < 0 || ks < 0) continue;
    const Node& q = g.nodes[static_cast<size_t>(qs)];
    const Node& k = g.nodes[static_cast<size_t>(ks)];
    const Node& v = g.nodes[static_cast<size_t>(vs)];
    if (q.inputs[0] != k.inputs[0] || q.inputs[0] != v.inputs[0]) continue;
    if (q.part != 0 || k.part != 1 || v.part != 2) continue;
    const int64_t dh = g.tensor(q.output).shape.back();
    const float want = 1.0f / std::sqrt(static_cast<float>(dh));
    if (g.nodes[static_cast<size_t>(scale)].alpha != want) continue;  // the op's scale is fixed
    for (int d : {ws, sm, vs, mask, scale, sc, qs, ks}) drop[static_cast<size_t>(d)] = 1;
    Node att;
    att.op = Op::Attention;
    att.inputs = {q.inputs[0]};
    att.output = merge.output;
    att.heads = q.heads;
    att.offset = g.nodes[static_cast<size_t>(mask)].offset;
    att.source = merge.source;
    merge = att;
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop[i]) nodes.push_back(g.nodes[i]);
  g.nodes = std::move(nodes);
  reindex(g);
  return g;
}

}  // namespace minigpt::compile
