// The graph IR's helpers: op names, the printer, the verifier and the structural hash (ir.h).
#include "compile/ir.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

namespace minigpt::compile {

std::string_view op_name(Op op) {
  static constexpr std::array<std::string_view, kOpCount> names = {
      "embedding",  "pos_embedding", "matmul",      "add",          "sub",
      "mul",        "div",           "bias_add",    "add_scalar",   "mul_scalar",
      "exp",        "rsqrt",         "gelu",        "reduce_max",   "reduce_sum",
      "softmax",    "layernorm",     "split_heads", "attn_scores",  "causal_mask",
      "weighted_sum", "merge_heads", "kv_write",    "attention"};
  return names[static_cast<size_t>(op)];
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int Graph::add_tensor(TensorInfo t) {
  if (t.strides.empty()) t.strides = contiguous_strides(t.shape);
  tensors.push_back(std::move(t));
  return static_cast<int>(tensors.size()) - 1;
}

std::vector<int> Graph::consumers(int tensor_id) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& in = nodes[i].inputs;
    if (std::find(in.begin(), in.end(), tensor_id) != in.end()) out.push_back(static_cast<int>(i));
  }
  return out;
}

bool Graph::is_graph_output(int tensor_id) const {
  return std::find(outputs.begin(), outputs.end(), tensor_id) != outputs.end();
}

int64_t position_capacity(const Graph& g, int pos_tensor) {
  int64_t cap = 0;
  for (const Node& n : g.nodes) {
    if (position_input(n) != pos_tensor) continue;
    // the position table's rows (pos_embedding), else the KV cache's rows
    const int64_t rows = g.tensor(n.inputs[n.op == Op::PosEmbedding ? 0 : 1]).shape.at(0);
    cap = cap == 0 ? rows : std::min(cap, rows);
  }
  return cap;
}

namespace {

std::string node_attrs(const Node& n) {
  // a runtime offset prints as the input it is read from: one text (and hash) for every t
  const std::string off = n.runtime_offset ? fmt::format("%{}", n.inputs.back()) : fmt::format("{}", n.offset);
  std::string a;
  switch (n.op) {
    case Op::AddScalar:
    case Op::MulScalar: a = fmt::format(", alpha={}", n.alpha); break;
    case Op::LayerNorm: a = fmt::format(", eps={}", n.alpha); break;
    case Op::PosEmbedding: a = fmt::format(", period={}, offset={}", n.period, off); break;
    case Op::ReduceMax:
    case Op::ReduceSum: a = n.acc_f64 ? ", acc=f64" : ""; break;
    case Op::SplitHeads: a = fmt::format(", part={}, heads={}", "qkv"[n.part], n.heads); break;
    case Op::CausalMask: a = fmt::format(", offset={}", n.offset); break;
    case Op::KvWrite: a = fmt::format(", part={}, row={}", "qkv"[n.part], off); break;
    case Op::Attention: a = fmt::format(", heads={}, offset={}", n.heads, off); break;
    case Op::Matmul:
      if (n.has_bias) a += ", +bias";
      if (n.has_residual) a += ", +residual";
      if (n.gelu) a += ", gelu";
      break;
    default: break;
  }
  return a;
}

}  // namespace

std::string print_graph(const Graph& g, std::string_view stage) {
  std::string s = fmt::format("# graph {} ({}): {} tensors, {} nodes\n", g.name, stage,
                              g.tensors.size(), g.nodes.size());
  for (int id : g.inputs) {
    const TensorInfo& t = g.tensor(id);
    s += fmt::format("%{} = input '{}' {} {}\n", id, t.name,
                     t.dtype == DType::I32 ? "i32" : "f32", shape_text(t.shape));
  }
  for (int id : g.weights) {
    const TensorInfo& t = g.tensor(id);
    s += fmt::format("%{} = weight '{}' f32 {}\n", id, t.name, shape_text(t.shape));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const TensorInfo& t = g.tensor(n.output);
    std::string args;
    for (size_t k = 0; k < n.inputs.size(); ++k) args += fmt::format("{}%{}", k ? ", " : "", n.inputs[k]);
    std::string where;
    if (n.group >= 0) where += fmt::format(" [k{}]", n.group);
    if (!t.materialized) where += " (not materialised)";
    if (t.arena_offset >= 0) where += fmt::format(" @arena+{}", t.arena_offset);
    if (t.alias_of >= 0) where += fmt::format(" (in place in %{})", t.alias_of);
    if (t.kind == TensorKind::Output) where += " -> output";
    s += fmt::format("%{} = {}({}{}) {} '{}'{}   # {}\n", n.output, op_name(n.op), args,
                     node_attrs(n), shape_text(t.shape), t.name, where, n.source);
  }
  std::string outs;
  for (int id : g.outputs) outs += fmt::format(" %{}", id);
  s += fmt::format("return{}\n", outs);
  if (g.arena_bytes > 0) s += fmt::format("# arena: {} bytes\n", g.arena_bytes);
  return s;
}

namespace {

// One problem -> Error naming the pass and the node.
[[noreturn]] void bad(std::string_view after, const Graph& g, int node, const std::string& what) {
  if (node >= 0) {
    const Node& n = g.nodes[static_cast<size_t>(node)];
    MINIGPT_FAIL("IR verifier (after {}): node {} ({} -> %{}, from {}): {}", after, node,
                 op_name(n.op), n.output, n.source, what);
  }
  MINIGPT_FAIL("IR verifier (after {}): {}", after, what);
}

using Shape = std::vector<int64_t>;

// The expected output shape of node n given its inputs' shapes; "" when fine, else why not.
std::string check_shapes(const Graph& g, const Node& n) {
  auto sh = [&](size_t k) -> const Shape& { return g.tensor(n.inputs[k]).shape; };
  const Shape& out = g.tensor(n.output).shape;
  auto need_inputs = [&](size_t lo, size_t hi) -> std::string {
    if (data_inputs(n) < lo || data_inputs(n) > hi)
      return fmt::format("expects {}..{} inputs, has {}", lo, hi, data_inputs(n));
    return "";
  };
  // Views that keep the rows and the last axis are the same buffer: (N, C) == (B, T, C).
  auto expect = [&](const Shape& want) -> std::string {
    int64_t a = 1, b = 1;
    for (int64_t v : out) a *= v;
    for (int64_t v : want) b *= v;
    if (a != b || out.empty() || want.empty() || out.back() != want.back()) return fmt::format("output shape {} but the op gives {}", shape_text(out), shape_text(want));
    return "";
  };
  auto rows_of = [](const Shape& s) {
    int64_t r = 1;
    for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
    return r;
  };
  std::string e;
  if (n.runtime_offset) {
    if (n.op != Op::PosEmbedding && n.op != Op::KvWrite && !(n.op == Op::Attention && data_inputs(n) == 3))
      return "only pos_embedding, kv_write and the decode attention take a runtime offset";
    if (n.inputs.size() < 2) return "a runtime offset needs its position input";
    const TensorInfo& p = g.tensor(n.inputs.back());
    if (p.kind != TensorKind::Input || p.dtype != DType::I32 || p.shape != Shape{1})
      return fmt::format("the runtime offset %{} must be a (1) i32 graph input", n.inputs.back());
    if (n.offset != 0) return "a runtime offset keeps the attribute at 0";
    if (n.op == Op::PosEmbedding && (n.period != 1 || out.size() != 2 || out[0] != 1))
      return "a runtime-offset pos_embedding gathers one row";
  }
  if (kPointwise.contains(n.op)) {
    const bool binary = kBinary.contains(n.op);
    if (!(e = need_inputs(binary ? 2 : 1, binary ? 2 : 1)).empty()) return e;
    if ((e = expect(sh(0))).empty() && binary) {
      const Shape& b = sh(1);
      const bool same = b == sh(0);
      const bool per_row = !b.empty() && b.back() == 1 && rows_of(b) == rows_of(sh(0));
      const bool per_col = b.size() == 1 && b[0] == sh(0).back();
      if (n.op == Op::BiasAdd && !per_col) return fmt::format("bias {} does not match {}", shape_text(b), shape_text(sh(0)));
      if (!same && !per_row && !per_col)
        return fmt::format("operand {} does not broadcast to {}", shape_text(b), shape_text(sh(0)));
    }
    return e;
  }
  switch (n.op) {
    case Op::Embedding:
      if (!(e = need_inputs(2, 2)).empty()) return e;
      if (g.tensor(n.inputs[0]).dtype != DType::I32) return "ids must be i32";
      if (sh(1).size() != 2) return "table must be 2-D";
      return expect({g.tensor(n.inputs[0]).numel(), sh(1)[1]});
    case Op::PosEmbedding:
      if (!(e = need_inputs(1, 1)).empty()) return e;
      if (n.period < 1 || n.offset < 0 || n.offset + n.period > sh(0)[0])
        return fmt::format("positions [{}, {}) outside the table's {} rows", n.offset, n.offset + n.period, sh(0)[0]);
      if (out.size() != 2 || out[1] != sh(0)[1] || out[0] % n.period != 0) return "bad output shape";
      return "";
    case Op::Matmul: {
      const size_t want = 2 + (n.has_bias ? 1 : 0) + (n.has_residual ? 1 : 0);
      if (n.inputs.size() != want) return fmt::format("expects {} inputs, has {}", want, n.inputs.size());
      if (n.gelu && n.has_residual) return "GELU and a residual together are not an epilogue the GEMM has";
      const Shape& x = sh(0);
      const Shape& w = sh(1);
      if (w.size() != 2 || x.back() != w[1]) return fmt::format("x {} and W {} disagree", shape_text(x), shape_text(w));
      Shape o = x;
      o.back() = w[0];
      if (n.has_bias && sh(2) != Shape{w[0]}) return "bias shape";
      if (n.has_residual && sh(want - 1) != o) return "residual shape";
      return expect(o);
    }
    case Op::ReduceMax:
    case Op::ReduceSum: {
      if (!(e = need_inputs(1, 1)).empty()) return e;
      Shape o = sh(0);
      o.back() = 1;
      return expect(o);
    }
    case Op::Softmax:
      if (!(e = need_inputs(1, 1)).empty()) return e;
      return expect(sh(0));
    case Op::LayerNorm:
      if (!(e = need_inputs(3, 3)).empty()) return e;
      if (sh(1) != Shape{sh(0).back()} || sh(2) != Shape{sh(0).back()}) return "gain/bias shape";
      return expect(sh(0));
    case Op::SplitHeads: {
      if (!(e = need_inputs(1, 1)).empty()) return e;
      const Shape& q = sh(0);
      if (q.size() != 3 || q[2] % (3 * n.heads) != 0) return "qkv must be (B, T, 3C), C divisible by heads";
      return expect({q[0], n.heads, q[1], q[2] / 3 / n.heads});
    }
    case Op::AttnScores:
      if (!(e = need_inputs(2, 2)).empty()) return e;
      if (sh(0).size() != 4 || sh(1).size() != 4 || sh(0)[3] != sh(1)[3]) return "q/k shapes";
      return expect({sh(0)[0], sh(0)[1], sh(0)[2], sh(1)[2]});
    case Op::CausalMask:
      if (!(e = need_inputs(1, 1)).empty()) return e;
      return expect(sh(0));
    case Op::WeightedSum:
      if (!(e = need_inputs(2, 2)).empty()) return e;
      if (sh(0)[3] != sh(1)[2]) return "p/v shapes";
      return expect({sh(0)[0], sh(0)[1], sh(0)[2], sh(1)[3]});
    case Op::MergeHeads:
      if (!(e = need_inputs(1, 1)).empty()) return e;
      return expect({sh(0)[0], sh(0)[2], sh(0)[1] * sh(0)[3]});
    case Op::KvWrite:
      if (!(e = need_inputs(2, 2)).empty()) return e;
      if (sh(0).back() != 3 * sh(1).back() || n.offset >= sh(1)[0]) return "qkv/cache shapes or row";
      if (g.tensor(n.output).alias_of != n.inputs[1]) return "output must alias the cache";
      return expect(sh(1));
    case Op::Attention: {
      if (data_inputs(n) != 1 && data_inputs(n) != 3) return "expects qkv [, k cache, v cache]";
      const Shape& q = sh(0);
      if (q.size() != 3 || q[2] % (3 * n.heads) != 0) return "qkv must be (B, T, 3C)";
      return expect({q[0], q[1], q[2] / 3});
    }
    default: return "";
  }
}

}  // namespace

void verify(const Graph& g, std::string_view after) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> written(static_cast<size_t>(nt), -2);  // -2 never, -1 leaf, else node
  for (int id : g.inputs) {
    if (id < 0 || id >= nt) bad(after, g, -1, fmt::format("input id {} out of range", id));
    if (g.tensor(id).kind != TensorKind::Input) bad(after, g, -1, fmt::format("%{} listed as input is not one", id));
    written[static_cast<size_t>(id)] = -1;
  }
  for (int id : g.weights) {
    if (id < 0 || id >= nt) bad(after, g, -1, fmt::format("weight id {} out of range", id));
    if (g.tensor(id).dtype != DType::F32) bad(after, g, -1, fmt::format("weight %{} is not f32", id));
    written[static_cast<size_t>(id)] = -1;
  }
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    for (int in : n.inputs) {
      if (in < 0 || in >= nt) bad(after, g, i, fmt::format("input %{} does not exist", in));
      if (written[static_cast<size_t>(in)] == -2)
        bad(after, g, i, fmt::format("reads %{} '{}' before anything writes it", in, g.tensor(in).name));
      if (g.tensor(in).dtype == DType::I32 && !(n.op == Op::Embedding && in == n.inputs[0]) && in != position_input(n))
        bad(after, g, i, fmt::format("i32 tensor %{} used as data", in));
    }
    if (n.output < 0 || n.output >= nt) bad(after, g, i, "output does not exist");
    if (written[static_cast<size_t>(n.output)] != -2)
      bad(after, g, i, fmt::format("%{} is written twice", n.output));
    written[static_cast<size_t>(n.output)] = i;
    const TensorInfo& t = g.tensor(n.output);
    if (t.producer != i) bad(after, g, i, fmt::format("%{} records producer {}", n.output, t.producer));
    if (t.dtype != DType::F32) bad(after, g, i, "outputs must be f32");
    if (t.kind == TensorKind::Input || t.kind == TensorKind::Weight) bad(after, g, i, "writes a leaf");
    if (t.alias_of >= 0 && n.op != Op::KvWrite) bad(after, g, i, "only kv_write may alias");
    if (const std::string e = check_shapes(g, n); !e.empty()) bad(after, g, i, e);
    if (n.op == Op::Attention && data_inputs(n) == 3) {
      // decode: the caches are KvWrite results of this step
      for (int k = 1; k < 3; ++k) {
        const int p = g.tensor(n.inputs[static_cast<size_t>(k)]).producer;
        if (p < 0 || g.nodes[static_cast<size_t>(p)].op != Op::KvWrite) bad(after, g, i, "cache inputs must come from kv_write");
      }
    }
  }
  for (int id : g.outputs) {
    if (id < 0 || id >= nt || written[static_cast<size_t>(id)] < 0)
      bad(after, g, -1, fmt::format("output %{} is not produced by a node", id));
    if (g.tensor(id).kind != TensorKind::Output) bad(after, g, -1, fmt::format("output %{} is not marked as one", id));
  }
  // No dangling node: every node reaches an output (backwards reachability).
  std::vector<char> live(static_cast<size_t>(nt), 0);
  for (int id : g.outputs) live[static_cast<size_t>(id)] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (!live[static_cast<size_t>(n.output)]) bad(after, g, static_cast<int>(i), "dangling: its result reaches no output");
    for (int in : n.inputs) live[static_cast<size_t>(in)] = 1;
  }
  // Groups: a group's members must not depend on another group that depends on it (the groups
  // form a DAG); a tensor read outside its group must be materialised.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (int in : n.inputs) {
      const TensorInfo& t = g.tensor(in);
      if (t.producer < 0 || t.materialized) continue;
      if (g.nodes[static_cast<size_t>(t.producer)].group != n.group || n.group < 0)
        bad(after, g, static_cast<int>(i), fmt::format("reads %{} which is not materialised outside its kernel", in));
    }
    if (!g.tensor(n.output).materialized && g.is_graph_output(n.output))
      bad(after, g, static_cast<int>(i), "a graph output must be materialised");
  }
  {
    int ng = 0;
    for (const Node& n : g.nodes) ng = std::max(ng, n.group + 1);
    std::vector<std::set<int>> deps(static_cast<size_t>(ng));
    for (const Node& n : g.nodes) {
      if (n.group < 0) continue;
      for (int in : n.inputs) {
        const int p = g.tensor(in).producer;
        if (p < 0) continue;
        const int pg = g.nodes[static_cast<size_t>(p)].group;
        if (pg >= 0 && pg != n.group) deps[static_cast<size_t>(n.group)].insert(pg);
      }
    }
    // cycle check by DFS colours
    std::vector<int> colour(static_cast<size_t>(ng), 0);
    std::function<void(int)> dfs = [&](int v) {
      colour[static_cast<size_t>(v)] = 1;
      for (int w : deps[static_cast<size_t>(v)]) {
        if (colour[static_cast<size_t>(w)] == 1) bad(after, g, -1, fmt::format("kernels k{} and k{} depend on each other", v, w));
        if (colour[static_cast<size_t>(w)] == 0) dfs(w);
      }
      colour[static_cast<size_t>(v)] = 2;
    };
    for (int v = 0; v < ng; ++v)
      if (colour[static_cast<size_t>(v)] == 0) dfs(v);
  }
  // Arena: planned slots inside the arena, and no two tensors whose lifetimes (first writer
  // to last reader, in kernel order) overlap share bytes.
  struct Live {
    int id;
    int64_t first, last;
  };
  std::vector<Live> planned;
  for (const Node& n : g.nodes) {
    const TensorInfo& t = g.tensor(n.output);
    if (t.arena_offset < 0) continue;
    if (t.arena_offset + t.bytes() > g.arena_bytes)
      bad(after, g, t.producer, fmt::format("%{} at arena+{} ({} bytes) runs past the arena's {} bytes", n.output, t.arena_offset, t.bytes(), g.arena_bytes));
    int64_t last = n.group;
    for (int c : g.consumers(n.output)) last = std::max<int64_t>(last, g.nodes[static_cast<size_t>(c)].group);
    planned.push_back({n.output, n.group, last});
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    for (size_t j = i + 1; j < planned.size(); ++j) {
      const Live& a = planned[i];
      const Live& b = planned[j];
      if (a.last < b.first || b.last < a.first) continue;
      const TensorInfo& ta = g.tensor(a.id);
      const TensorInfo& tb = g.tensor(b.id);
      if (ta.arena_offset + ta.bytes() <= tb.arena_offset || tb.arena_offset + tb.bytes() <= ta.arena_offset) continue;
      bad(after, g, -1, fmt::format("%{} and %{} are live at once but share arena bytes", a.id, b.id));
    }
  }
}

std::string graph_hash(const Graph& g) {
  // FNV-1a 64 over the printed graph: it holds every op, attribute, shape and group.
  const std::string text = print_graph(g, "hash");
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace minigpt::compile
