// The passes: each a function from graph to graph (one file each in this folder), each
// followed by the verifier when run through run_passes. In pipeline order:
//
//   fuse_attention    split/scores/scale/mask/softmax/weighted-sum/merge -> one attention op
//                     (per head, online softmax, no score matrix)
//   decompose         softmax -> max, sub, exp, sum, div; layernorm -> sum, mean, sub, square,
//                     sum, rsqrt, mul, gain, bias: the pieces fusion then regroups
//   matmul_epilogue   matmul + bias_add [+ gelu | + residual add] -> one matmul with epilogue
//   fuse_pointwise    pointwise chains (and gathers) merged into one group per iteration space
//   fuse_reductions   reductions merged with their pointwise prologue and epilogue (one kernel
//                     per softmax, per layernorm with the residual add before it)
//   matmul_prologue   (opt-in, CUDA) a layernorm's row-wise group, or an attention, merged into
//                     the matmul that reads it: the GEMM computes its tile's rows of x in shared
//                     memory first
//   fuse_mlp          (opt-in, CUDA) an MLP's fc1 (with its layernorm prologue) and fc2 as one
//                     group: the GEMM computes its tile's rows of h in shared memory first; with
//                     fuse_mlp_proj also the attention's projection before the layernorm, and
//                     with fuse_mlp_attention the prefill attention before that projection
//   remove_dead       nodes whose result reaches no output dropped
//   plan_buffers      every materialised intermediate gets an arena offset; tensors whose
//                     lifetimes (in kernels) do not overlap share bytes
//
// What they do not do: choose loop orders or vector widths (codegen), name kernels (schedule).
#pragma once

#include "compile/ir.h"

#include <span>
#include <string>
#include <vector>

namespace minigpt::compile {

// Each pass takes the graph by value and returns the rewritten one: run_passes moves one graph
// through them (a copy per pass was ~10% of lowering); a caller that keeps its graph passes a copy.
Graph fuse_attention(Graph g);
Graph decompose(Graph g);
Graph matmul_epilogue(Graph g);
Graph fuse_pointwise(Graph g);
Graph fuse_reductions(Graph g);
// rowwise: fold row-wise groups (layernorms); attention: fold prefill attentions.
Graph matmul_prologue(Graph g, bool rowwise = true, bool attention = true);
// proj: also the matmul whose result the MLP's layernorm reads (the attention's projection)
Graph fuse_mlp(Graph g, bool proj = false, bool attention = false, bool next = false);
Graph remove_dead(Graph g);
Graph plan_buffers(Graph g);

struct PassOptions {
  bool attention = true;  // fuse_attention
  bool epilogue = true;   // matmul_epilogue
  bool fusion = true;     // fuse_pointwise and fuse_reductions (off: one kernel per op)
  // matmul_prologue (after fuse_reductions; needs fusion; row-wise prologues): off by default, since only a back end
  // whose GEMM takes a row-wise prologue (the CUDA back end's generated GEMM) may turn it on
  bool matmul_prologue = false;
  // the same for a prefill's attention before its output projection
  bool attention_prologue = false;
  // fuse_mlp (after matmul_prologue; needs fusion): off by default, for the same reason
  bool fuse_mlp = false;
  // with fuse_mlp: the attention's output projection (the matmul the MLP's layernorm reads) in
  // the MLP's group too
  bool fuse_mlp_proj = false;
  // with fuse_mlp_proj: a prefill's attention before that projection in the group too
  bool fuse_mlp_attention = false;
  // with fuse_mlp_proj: the next block's layernorm and the matmul it feeds after fc2 (fuse_mlp.cpp's mlp_next)
  bool fuse_mlp_next = false;
};

// The widest rows matmul_prologue folds into a GEMM (a tile's rows live in shared memory).
inline constexpr int64_t kPrologueMaxCols = 1024;
// An attention prologue's limits: a head within a warp's lanes, its keys in a few registers.
inline constexpr int64_t kPrologueMaxHeadDim = 32, kPrologueMaxKeys = 256;
// fuse_mlp's limits: h's tile (8 rows of H) and fc1's x tile (8 rows of its K) in shared memory.
inline constexpr int64_t kMlpMaxHidden = 1024, kMlpMaxIn = 256;
// fuse_mlp_next's widest matmul after the MLP (its tile's partial sums in shared memory)
inline constexpr int64_t kMlpMaxNextCols = 256;

// The pipeline above, the verifier after every pass.
Graph run_passes(const Graph& g, const PassOptions& opt = {});

// ---- helpers the passes share (pass_util.cpp) -----------------------------------------

// Recomputes every tensor's producer from the node list (passes reorder and drop nodes).
void reindex(Graph& g);
// Every tensor's readers at once: of(t) is Graph::consumers(t) (node ids in order, each once),
// from one pass over the nodes into two flat arrays, for the helpers that ask for many tensors'
// readers (Graph::consumers scans every node per call). Valid until g's nodes change.
class NodeUsers {
 public:
  explicit NodeUsers(const Graph& g);
  std::span<const int> of(int tensor) const {
    const size_t t = static_cast<size_t>(tensor);
    return {nodes_.data() + start_[t], start_[t + 1] - start_[t]};
  }

 private:
  std::vector<size_t> start_;  // tensor t's readers: nodes_[start_[t], start_[t + 1])
  std::vector<int> nodes_;
};
// Gives every node without a group its own; reorders nodes so that each group is contiguous
// and groups come in a dependency order; renumbers groups 0.. in that order; recomputes which
// tensors are materialised (read outside their group or a graph output).
void normalize_groups(Graph& g);
// Whether merging groups a and b keeps the group graph acyclic (no path a -> outside -> b).
bool can_merge(const Graph& g, int a, int b);
// The same with g's readers already indexed (NodeUsers(g), for a pass that asks many times).
bool can_merge(const Graph& g, int a, int b, const NodeUsers& users);
// Where a rowwise group iterates: rows R and columns C of its widest tensor.
struct RowSpace {
  int64_t rows = 0, cols = 0;
};
RowSpace row_space(const Graph& g, int group);

}  // namespace minigpt::compile
