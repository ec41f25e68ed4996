// The compiler's graph IR, as data: an ordered op enum, op groups as constexpr sets, typed
// tensors with shapes and strides, nodes that remember the eager op they came from, and a
// graph of them in topological order. Plus the printer (readable text for every stage) and
// the verifier every pass is followed by.
//
// Conventions (what the passes and code generators rely on):
// - Every node has exactly one output tensor; tensors are written once (SSA). The one
//   exception is KvWrite, whose output *aliases* a mutable graph input (the KV cache) and
//   writes one row of it in place.
// - A runtime position (a symbolic size, as a compiler with dynamic shapes has): a node with
//   runtime_offset reads its offset not from the attribute but from its last input, a graph
//   input of shape (1) i32 ("pos"), at run time. The static shapes bound it (the KV cache's
//   rows, the position table's rows: the capacity); the runner guards pos < capacity before
//   the call. PosEmbedding, KvWrite and the decode Attention accept it, so one compiled decode
//   step serves every cache position.
// - Row-wise ops work on the last axis: a tensor of shape (..., C) is R = numel / C rows of C.
//   Reductions keep the axis: (..., C) -> (..., 1). Binary pointwise ops broadcast an operand
//   of shape (..., 1) (one value per row) or (C) (one value per column, a bias or a gain).
// - After fusion, node.group names the fused kernel a node belongs to; a tensor with
//   materialized == false lives only inside its kernel (no buffer, never stored).
// - After buffer planning, every materialised intermediate has an arena offset in bytes.
//
// What it does not do: transform graphs (passes/), decide kernels (schedule.h) or emit code
// (codegen_cpp.h). Nothing here is specific to the CPU: a CUDA code generator reads the same
// graph.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt::compile {

enum class DType : uint8_t { F32, I32 };

// The op enum, ordered: leaves, gathers, matmul, pointwise, reductions, composites (which
// decompose lowers), attention pieces (which fuse_attention replaces), fused ops.
enum class Op : uint8_t {
  // gathers: out (N, C)
  Embedding,     // (ids (N) i32, table (V, C)): out[n] = table[ids[n]]
  PosEmbedding,  // (table (P, C) [, pos]); attrs period T, offset: out[n] = table[offset + n % T]
  // matmul: out (N, M) = x (N, K) W (M, K)^T [+ bias (M)] then [+ residual (N, M) | GELU]
  Matmul,
  // pointwise, binary (broadcasting as above)
  Add,
  Sub,
  Mul,
  Div,
  BiasAdd,  // (x (R, C), b (C)): the Linear's bias, kept apart so it can become an epilogue
  // pointwise, unary
  AddScalar,  // x + alpha
  MulScalar,  // x * alpha
  Exp,
  Rsqrt,  // 1 / sqrt(x), evaluated in double
  Gelu,   // exact erf form
  // reductions over the last axis, keepdim; attr acc_f64: accumulate in double
  ReduceMax,
  ReduceSum,
  // composites: decompose lowers them into the ops above
  Softmax,    // last axis
  LayerNorm,  // (x, weight (C), bias (C)); attr eps
  // attention pieces (B batch, NH heads, T queries, S keys, dh head size)
  SplitHeads,   // qkv (B, T, 3C) -> (B, NH, T, dh); attr part 0 q, 1 k, 2 v
  AttnScores,   // q (B, NH, T, dh), k (B, NH, S, dh) -> (B, NH, T, S) = q k^T
  CausalMask,   // (B, NH, T, S): -inf where key s > query t + offset (attr offset)
  WeightedSum,  // p (B, NH, T, S), v (B, NH, S, dh) -> (B, NH, T, dh)
  MergeHeads,   // (B, NH, T, dh) -> (B, T, NH*dh)
  KvWrite,      // (qkv (1, 3C), cache (cap, C) [, pos]); attrs part, offset=t: cache row t = part
  // fused
  Attention,  // (qkv (B, T, 3C) [, k cache, v cache [, pos]]) -> (B, T, C); causal, online softmax
};
inline constexpr int kOpCount = static_cast<int>(Op::Attention) + 1;

std::string_view op_name(Op op);  // "layernorm", "reduce_max", ...

// Op groups as constexpr sets (a bitset over the enum).
struct OpSet {
  uint64_t bits = 0;
  constexpr OpSet(std::initializer_list<Op> ops) {
    for (Op o : ops) bits |= uint64_t{1} << static_cast<int>(o);
  }
  constexpr bool contains(Op o) const { return (bits >> static_cast<int>(o)) & 1u; }
};
inline constexpr OpSet kGather{Op::Embedding, Op::PosEmbedding};
inline constexpr OpSet kBinary{Op::Add, Op::Sub, Op::Mul, Op::Div, Op::BiasAdd};
inline constexpr OpSet kUnary{Op::AddScalar, Op::MulScalar, Op::Exp, Op::Rsqrt, Op::Gelu};
inline constexpr OpSet kPointwise{Op::Add,       Op::Sub,       Op::Mul, Op::Div,
                                  Op::BiasAdd,   Op::AddScalar, Op::MulScalar,
                                  Op::Exp,       Op::Rsqrt,     Op::Gelu};
inline constexpr OpSet kReduction{Op::ReduceMax, Op::ReduceSum};
inline constexpr OpSet kMatmul{Op::Matmul};
inline constexpr OpSet kComposite{Op::Softmax, Op::LayerNorm};
inline constexpr OpSet kAttentionPiece{Op::SplitHeads, Op::AttnScores, Op::CausalMask,
                                       Op::WeightedSum, Op::MergeHeads};
// What a generated row-wise loop nest can hold: gathers, pointwise, reductions.
inline constexpr OpSet kRowwise{Op::Embedding, Op::PosEmbedding, Op::Add,     Op::Sub,
                                Op::Mul,       Op::Div,          Op::BiasAdd, Op::AddScalar,
                                Op::MulScalar, Op::Exp,          Op::Rsqrt,   Op::Gelu,
                                Op::ReduceMax, Op::ReduceSum};

enum class TensorKind : uint8_t { Input, Weight, Intermediate, Output };

struct TensorInfo {
  std::string name;  // "ids", "wte.weight", "blocks.0.ln1.out"
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements; contiguous row-major unless a view says else
  TensorKind kind = TensorKind::Intermediate;
  int producer = -1;          // node id; -1 for inputs and weights
  bool materialized = true;   // false: fused away, lives only inside its kernel
  int alias_of = -1;          // KvWrite: the mutable input this tensor writes in place
  int64_t arena_offset = -1;  // bytes; set by plan_buffers for materialised intermediates

  int64_t numel() const;
  int64_t bytes() const { return numel() * 4; }  // f32 and i32 alike
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
};

struct Node {
  Op op{};
  std::vector<int> inputs;  // tensor ids
  int output = -1;          // tensor id
  std::string source;       // the eager op it came from: "blocks.2.ln1 (cpu::layernorm_forward)"
  std::string origin;       // the op it was decomposed from ("softmax"); empty: op itself
  // attributes (which ones an op reads is documented at the enum)
  float alpha = 0.0f;      // AddScalar, MulScalar, LayerNorm eps
  int64_t period = 0;      // PosEmbedding
  int64_t offset = 0;      // PosEmbedding, CausalMask, KvWrite, Attention: first query's position
  bool runtime_offset = false;  // offset = the last input's value at run time (0 in `offset`)
  int part = 0;            // SplitHeads, KvWrite
  int heads = 0;           // SplitHeads, Attention
  bool acc_f64 = false;    // reductions
  // Matmul epilogue (matmul_epilogue pass): inputs are [x, W, bias?, residual?]
  bool has_bias = false;
  bool has_residual = false;
  bool gelu = false;
  int group = -1;  // fused kernel id (fusion passes)
};

struct Graph {
  std::string name;  // "tinyhead", "gpt_B2_T16", "gpt_decode_t5"
  std::vector<TensorInfo> tensors;
  std::vector<Node> nodes;  // topological order
  std::vector<int> inputs;  // tensor ids, in call order
  std::vector<int> weights;
  std::vector<int> outputs;
  int64_t arena_bytes = 0;  // set by plan_buffers

  int add_tensor(TensorInfo t);  // fills contiguous strides when empty; returns the id
  const TensorInfo& tensor(int id) const { return tensors.at(static_cast<size_t>(id)); }
  TensorInfo& tensor(int id) { return tensors.at(static_cast<size_t>(id)); }
  // node ids reading tensor id (in order)
  std::vector<int> consumers(int tensor_id) const;
  bool is_graph_output(int tensor_id) const;
};

// The position input of a node with a runtime offset, else -1; the inputs before it.
inline int position_input(const Node& n) { return n.runtime_offset ? n.inputs.back() : -1; }
inline size_t data_inputs(const Node& n) { return n.inputs.size() - (n.runtime_offset ? 1 : 0); }

// The exclusive bound on a runtime position input's value: the fewest rows (table, cache) of
// the nodes reading it as their offset; 0 when none does.
int64_t position_capacity(const Graph& g, int pos_tensor);

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
std::string shape_text(const std::vector<int64_t>& shape);  // "(2, 16, 64)"

// Readable text: one line per tensor leaf, one per node ("%12 = layernorm(%3, w:%4, ...)"),
// with shapes, group ids, arena offsets and the eager source.
std::string print_graph(const Graph& g, std::string_view stage);

// Shapes and dtypes per op, every input written before it is read (defined by an earlier
// node, a graph input or a weight), one producer per tensor, no dangling node (every node's
// output reaches an output), groups contiguous and acyclic, arena slots of live tensors
// disjoint. Throws Error naming the pass (after) and the first problem.
void verify(const Graph& g, std::string_view after);

// Stable hash of the graph's structure and shapes (not the weights' values): part of the
// JIT cache key and the kernel file names.
std::string graph_hash(const Graph& g);

}  // namespace minigpt::compile
