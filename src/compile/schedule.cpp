// Schedule (schedule.h): groups -> named kernels with their reads, writes and costs.
#include "compile/schedule.h"

#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace minigpt::compile {

namespace {

// FLOPs of one node (elementwise ops count 1 per element, exp/erf/rsqrt too).
int64_t node_flops(const Graph& g, const Node& n) {
  const TensorInfo& out = g.tensor(n.output);
  switch (n.op) {
    case Op::Matmul: {
      const int64_t K = g.tensor(n.inputs[0]).cols();
      return 2 * out.numel() * K + out.numel() * ((n.has_bias ? 1 : 0) + (n.has_residual ? 1 : 0) + (n.gelu ? 8 : 0));
    }
    case Op::ReduceMax:
    case Op::ReduceSum: return g.tensor(n.inputs[0]).numel();
    case Op::Embedding:
    case Op::PosEmbedding:
    case Op::KvWrite: return 0;
    case Op::Attention: {
      const auto& q = g.tensor(n.inputs[0]).shape;  // (B, T, 3C)
      const int64_t B = q[0], T = q[1], C = q[2] / 3, dh = C / n.heads;
      int64_t pairs = 0;  // causal (query, key) pairs
      // a runtime offset: counted at its bound (the last cache row), the most work a call does
      const int64_t offset = n.runtime_offset ? g.tensor(n.inputs[1]).shape[0] - T : n.offset;
      for (int64_t t = 0; t < T; ++t) pairs += t + offset + 1;
      return B * n.heads * pairs * (4 * dh + 4);
    }
    default: return out.numel();
  }
}

}  // namespace

MlpParts mlp_parts(const Graph& g, const Kernel& k) {
  MlpParts p;
  const size_t n = k.nodes.size();
  auto op = [&](size_t i) { return g.nodes[static_cast<size_t>(k.nodes[i])].op; };
  p.mlp = n >= 2 && op(n - 1) == Op::Matmul && op(n - 2) == Op::Matmul;
  p.fc1 = n - 2;
  if (!p.mlp && n >= 4 && op(n - 1) == Op::Matmul) {  // fc1, fc2, the next layernorm's row-wise nodes, its matmul
    size_t j = n - 2;
    while (j > 0 && kRowwise.contains(op(j))) --j;
    if (j + 2 < n && j >= 1 && op(j) == Op::Matmul && op(j - 1) == Op::Matmul) {
      p.mlp = p.next = true;
      p.fc1 = j - 1;
    }
  }
  // attention, projection, the layernorm's nodes (at least one), fc1, fc2
  p.attention = p.mlp && p.fc1 > 2 && op(0) == Op::Attention;
  // projection, the layernorm's nodes, fc1, fc2
  p.proj = p.mlp && p.fc1 > (p.attention ? 2u : 1u) && op(p.attention ? 1 : 0) == Op::Matmul;
  return p;
}

namespace {

std::string kernel_stem(const Graph& g, const Kernel& k, GemmBackend gemm, const std::vector<GemmPick>& picks) {
  switch (k.kind) {
    case KernelKind::Matmul: {
      const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
      return gemm_use_generated(gemm, picks, matmul_gemm_shape(g, n)) ? "cpp_gemm" : "extern_linear";
    }
    case KernelKind::Attention: return "cpp_fused_attention";
    case KernelKind::KvWrite: return "cpp_kv_write";
    case KernelKind::Rowwise:
    case KernelKind::PrologueMatmul: break;
  }
  // a GEMM with a prologue: the prologue's ops, then "matmul" (cpp_fused_layernorm_matmul); an
  // MLP's two GEMMs (fuse_mlp): the first's prologue ops, then "mlp" (cpp_fused_layernorm_mlp),
  // and with the projection before it "proj" first (cpp_fused_proj_layernorm_mlp), with the
  // attention before that "attention_proj" (cpp_fused_attention_proj_layernorm_mlp)
  const bool prologue = k.kind == KernelKind::PrologueMatmul;
  const MlpParts parts = mlp_parts(g, k);
  const bool mlp = parts.mlp, attn = parts.attention, proj = parts.proj;
  std::set<std::string> names;
  for (size_t i = proj ? (attn ? 2 : 1) : 0; i < (mlp ? parts.fc1 : k.nodes.size() - (prologue ? 1 : 0)); ++i) {
    const Node& n = g.nodes[static_cast<size_t>(k.nodes[i])];
    names.insert(n.origin.empty() ? std::string(op_name(n.op)) : n.origin);
  }
  std::string s = attn ? "cpp_fused_attention_proj" : proj ? "cpp_fused_proj" : "cpp_fused";
  for (const std::string& n : names) s += "_" + n;
  return mlp ? s + (parts.next ? "_mlp_next" : "_mlp") : prologue ? s + "_matmul" : s;
}

}  // namespace

GemmSpec matmul_gemm_shape(const Graph& g, const Node& n) {
  const TensorInfo& x = g.tensor(n.inputs[0]);
  return gemm_spec(x.rows(), g.tensor(n.inputs[1]).shape[0], x.cols(),
                   n.gelu ? GemmEpilogueKind::kGelu : n.has_residual ? GemmEpilogueKind::kResidual : GemmEpilogueKind::kNone,
                   n.has_bias, gemm_isa(active_isa()));
}

Schedule schedule(const Graph& fused, GemmBackend gemm, const std::vector<GemmPick>& picks) {
  Schedule s;
  s.graph = fused;
  const Graph& g = s.graph;
  int ng = 0;
  for (const Node& n : g.nodes) {
    MINIGPT_CHECK(n.group >= 0, "schedule: node {} has no group (run the fusion passes first)", op_name(n.op));
    ng = std::max(ng, n.group + 1);
  }
  s.kernels.resize(static_cast<size_t>(ng));
  for (size_t i = 0; i < g.nodes.size(); ++i) s.kernels[static_cast<size_t>(g.nodes[i].group)].nodes.push_back(static_cast<int>(i));
  for (int gi = 0; gi < ng; ++gi) {
    Kernel& k = s.kernels[static_cast<size_t>(gi)];
    k.group = gi;
    MINIGPT_CHECK(!k.nodes.empty(), "schedule: group {} is empty", gi);
    const Node& first = g.nodes[static_cast<size_t>(k.nodes[0])];
    const Node& last = g.nodes[static_cast<size_t>(k.nodes.back())];
    // an MLP's two matmuls (fuse_mlp), with or without fc1's prologue: a PrologueMatmul whose
    // prologue ends in the first matmul
    const MlpParts parts = mlp_parts(g, k);
    const bool mlp = parts.mlp;
    if (mlp) k.kind = KernelKind::PrologueMatmul;
    else if (first.op == Op::Matmul) k.kind = KernelKind::Matmul;
    else if (last.op == Op::Matmul) k.kind = KernelKind::PrologueMatmul;
    else if (first.op == Op::Attention) k.kind = KernelKind::Attention;
    else if (first.op == Op::KvWrite) k.kind = KernelKind::KvWrite;
    else k.kind = KernelKind::Rowwise;
    for (int i : k.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(i)];
      if (k.kind == KernelKind::PrologueMatmul) {
        // an attention alone before the GEMM, or first before an MLP's projection (fuse_mlp_attention)
        const bool attention = n.op == Op::Attention && (k.nodes.size() == 2 || (parts.attention && i == k.nodes[0]));
        const bool fc1 = mlp && (i == k.nodes[parts.fc1] || (parts.next && i == k.nodes[parts.fc1 + 1]));  // an MLP's fc1 (fc2 too when not last)
        // the projection before its layernorm
        const bool proj = parts.proj && i == k.nodes[parts.attention ? 1 : 0];
        MINIGPT_CHECK(kRowwise.contains(n.op) || attention || fc1 || proj || i == k.nodes.back(),
                      "schedule: a GEMM's prologue holds row-wise ops, one attention, an MLP's first matmul or the projection "
                      "before it, not {} ({})",
                      op_name(n.op), n.source);
      } else if (k.kind == KernelKind::Rowwise) {
        MINIGPT_CHECK(kRowwise.contains(n.op), "schedule: {} ({}) has no C++ lowering; it must be fused or decomposed first",
                      op_name(n.op), n.source);
      } else {
        MINIGPT_CHECK(k.nodes.size() == 1, "schedule: a {} kernel holds one op", op_name(n.op));
      }
      for (int in : n.inputs) {
        const TensorInfo& t = g.tensor(in);
        const bool inside = t.producer >= 0 && g.nodes[static_cast<size_t>(t.producer)].group == gi;
        if (!inside && std::find(k.reads.begin(), k.reads.end(), in) == k.reads.end()) k.reads.push_back(in);
      }
      const TensorInfo& out = g.tensor(n.output);
      if (out.materialized) k.writes.push_back(n.output);
      else k.removed.push_back(n.output);
      k.flops += node_flops(g, n);
      if (std::find(k.sources.begin(), k.sources.end(), n.source) == k.sources.end()) k.sources.push_back(n.source);
    }
    for (int t : k.reads) {
      const TensorInfo& ti = g.tensor(t);
      if (k.kind == KernelKind::Attention && ti.alias_of >= 0) {
        // decode: only the rows [0, t] of the caches are read
        const Node& a = g.nodes[static_cast<size_t>(k.nodes[0])];
        k.bytes_read += (a.runtime_offset ? ti.rows() : a.offset + 1) * ti.cols() * 4;  // runtime: at most
      } else if (k.kind == KernelKind::KvWrite && ti.alias_of < 0 && ti.kind == TensorKind::Input) {
        // the cache is only written (one row)
      } else if (first.op == Op::Embedding && ti.kind == TensorKind::Weight && t == first.inputs[1]) {
        k.bytes_read += g.tensor(first.inputs[0]).numel() * ti.cols() * 4;  // the rows gathered
      } else {
        k.bytes_read += ti.bytes();
      }
    }
    for (int t : k.writes) {
      const TensorInfo& ti = g.tensor(t);
      k.bytes_written += k.kind == KernelKind::KvWrite ? ti.cols() * 4 : ti.bytes();
    }
    if (k.kind == KernelKind::Rowwise) {
      const RowSpace rs = row_space(g, gi);
      k.rows = rs.rows;
      k.cols = rs.cols;
    } else if (k.kind == KernelKind::PrologueMatmul) {  // the prologue's rows: the (first) GEMM's x
      const Node& mm = g.nodes[static_cast<size_t>(k.nodes[mlp ? parts.fc1 : k.nodes.size() - 1])];
      k.rows = g.tensor(mm.inputs[0]).rows();
      k.cols = g.tensor(mm.inputs[0]).cols();
    }
    k.name = fmt::format("{}_{}", kernel_stem(g, k, gemm, picks), gi);
  }
  return s;
}

std::string print_schedule(const Schedule& s) {
  std::string out = fmt::format("# schedule of {}: {} kernels, arena {} bytes\n", s.graph.name, s.kernels.size(), s.graph.arena_bytes);
  for (const Kernel& k : s.kernels) {
    std::string ops;
    for (int i : k.nodes) ops += fmt::format("{}{}", ops.empty() ? "" : ",", op_name(s.graph.nodes[static_cast<size_t>(i)].op));
    out += fmt::format("{:<44} ops={} read={}B written={}B flops={} removed={}\n", k.name, ops, k.bytes_read,
                       k.bytes_written, k.flops, k.removed.size());
  }
  return out;
}

}  // namespace minigpt::compile
