// The head kernel of the CUDA back end (codegen_cuda_parts.h's generate_head;
// CudaCodegenOptions::fuse_head): a generated GEMM (the LM head, with its row-wise prologue, ln_f)
// and the row-wise kernel after it that reads only the GEMM's result (the softmax over the
// vocabulary) as ONE kernel of 8-CTA thread-block clusters, one cluster per tile of R rows:
//
//   CTA c owns the GEMM's columns [c CW, (c + 1) CW) (CW = ceil(M / 8)): its W rows and biases
//     loaded before PDL's wait (an eighth of W each), the prologue's R rows (each CTA the whole
//     rows, as the MLP kernel's cluster form), the GEMM stage (mlp_gemm_stage: generate_gemm's
//     K slices and order); each output y[i][m] stored and written into CTA i's row lrow
//     (distributed shared memory: st.shared::cluster), so that CTA i < R holds row n0 + i whole;
//   one cluster barrier (its first half, the arrive, at the kernel's top: a CTA's shared memory
//     may be written only once every CTA of the cluster has started; the wait before the first
//     remote write). No CTA reads another's shared memory, so none waits for the others to exit;
//   warp 0 of CTA i computes the row-wise kernel's row n0 + i from lrow, with that kernel's own
//     statements (rowwise_row_from_shared: a warp per row, the same order).
//
// So y and the row-wise outputs are bitwise those of the two kernels apart; one launch fewer.
// What it does not do: rows wider than a warp's row kernel (1024 columns), residual epilogues,
// weights that are not graph weights (those keep the kernels apart; head_fusable says which).
#include "compile/codegen_cuda_parts.h"

#include "compile/codegen_text.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace minigpt::compile::cuda_gen {

namespace {

constexpr int kCl = 8, kWarps = 8, kThreads = 32 * kWarps;
constexpr int64_t kHeadRows = 8;            // rows per cluster tile: CTA c computes row c's row-wise part
constexpr int64_t kHeadSmemBytes = 46 * 1024;  // static shared memory of the kernel at most (48 KiB)

struct HeadShape {
  int64_t N, K, M, R, CW, JM, KC;
};
HeadShape head_shape(const Graph& g, const Node& n) {
  HeadShape s;
  s.N = g.tensor(n.inputs[0]).rows();
  s.K = g.tensor(n.inputs[0]).cols();
  s.M = g.tensor(n.inputs[1]).shape[0];
  s.R = std::min(kHeadRows, s.N);
  s.CW = (s.M + kCl - 1) / kCl;
  s.JM = (s.CW + 31) / 32;
  s.KC = (s.K + kWarps - 1) / kWarps;
  return s;
}
int64_t head_smem(const HeadShape& s) {  // part, xs, lrow
  return 4 * (kWarps * s.R * 32 * s.JM + s.R * s.K + s.M);
}

}  // namespace

bool head_fusable(const Graph& g, const Kernel& k, const Kernel& rk) {
  if (k.nodes.empty() || rk.kind != KernelKind::Rowwise || rk.reads.size() != 1) return false;
  if (k.kind != KernelKind::Matmul && k.kind != KernelKind::PrologueMatmul) return false;
  for (size_t i = 0; i + 1 < k.nodes.size(); ++i)  // a row-wise prologue only (not an MLP, not an attention)
    if (!kRowwise.contains(g.nodes[static_cast<size_t>(k.nodes[i])].op)) return false;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes.back())];
  if (n.op != Op::Matmul || n.has_residual || rk.reads[0] != n.output) return false;
  const HeadShape s = head_shape(g, n);
  if (rk.rows != s.N || rk.cols != s.M) return false;
  // the stage's weights early: graph weights, float4 K slices, at most 64 floats of W per thread
  const bool weights = g.tensor(n.inputs[1]).kind == TensorKind::Weight && (!n.has_bias || g.tensor(n.inputs[2]).kind == TensorKind::Weight);
  const bool v4 = s.K % 4 == 0 && s.KC % 4 == 0 && s.JM * s.KC <= 64;
  // the row kernel a warp per row (up to 1024 columns), the prologue's rows within a warp each
  return weights && v4 && s.M <= 32 * kPersistentSteps && s.K <= 1024 && head_smem(s) <= kHeadSmemBytes;
}

std::string generate_head(const Graph& g, const Kernel& k, const Kernel& rk, CudaLaunch& launch) {
  MINIGPT_CHECK(head_fusable(g, k, rk), "codegen_cuda: {} and {} cannot be one head kernel", k.name, rk.name);
  const Node& n = g.nodes[static_cast<size_t>(k.nodes.back())];
  const HeadShape s = head_shape(g, n);
  const int R = static_cast<int>(s.R);
  const int64_t tiles = (s.N + s.R - 1) / s.R;
  launch.function = k.name;
  launch.grid = static_cast<int>(tiles * kCl);
  launch.cluster_dim = kCl;
  launch.block = kThreads;
  std::vector<std::string> sig, params;
  // the GEMM's x: its row-wise prologue's rows (its other outputs stored by rank 0 only), or x staged
  std::string prologue;
  if (k.nodes.size() > 1) {
    prologue = rowwise_prologue(g, k, R, kCl, sig, params, launch.args);
  } else {
    sig.push_back("const float* __restrict__ x");
    launch.args.push_back(n.inputs[0]);
    params.push_back(fmt::format("x = {}", describe(g, n.inputs[0])));
    prologue = staged_x(s.N, s.K, R, kThreads);
  }
  align_shared(prologue, "xs");
  for (const char* p : {"const float* __restrict__ w", "const float* __restrict__ bias", "float* __restrict__ y"}) sig.push_back(p);
  launch.args.insert(launch.args.end(), {n.inputs[1], n.has_bias ? n.inputs[2] : -1, n.output});
  params.push_back(fmt::format("W = {}", describe(g, n.inputs[1])));
  if (n.has_bias) params.push_back(fmt::format("bias = {}", describe(g, n.inputs[2])));
  params.push_back(fmt::format("y = {} = {} (stored, and kept in shared memory for {})", describe(g, n.output), epilogue_text(n), rk.name));
  const std::string row = rowwise_row_from_shared(g, rk, n.output, "lrow", sig, params, launch.args);
  MINIGPT_CHECK(!row.empty(), "codegen_cuda: {}: a row of {} columns needs more than a warp", rk.name, s.M);
  const std::string row_guard = s.N % s.R ? fmt::format("n0 + i < {}", s.N) : "";
  const MlpStage st = mlp_gemm_stage(g, n, "w", "bias", "head", R, true, "xs", "", fmt::format("y[(n0 + i) * {} + c0 + m] = v;\nmg_cluster_st(&lrow[c0 + m], i, v);  // into row i's CTA", s.M),
                                     row_guard, "c0", s.CW);

  Kernel both = k;  // the comment: both kernels' ops, bytes (y read from shared memory, not again from global) and FLOPs
  both.nodes.insert(both.nodes.end(), rk.nodes.begin(), rk.nodes.end());
  both.sources.insert(both.sources.end(), rk.sources.begin(), rk.sources.end());
  both.bytes_read += rk.bytes_read - g.tensor(n.output).bytes();
  both.bytes_written += rk.bytes_written;
  both.flops += rk.flops;
  std::string code = kernel_comment(g, both, params,
                                    fmt::format("grid {} (row tiles of {}, a cluster of {} CTAs each: CTA c owns y's columns [c {}, (c + 1) {}) "
                                                "and {}'s row c of the tile), block {}",
                                                launch.grid, R, kCl, s.CW, s.CW, rk.name, kThreads));
  code += fmt::format("//   {} as the GEMM's epilogue (fuse_head): each cluster computes y's {} rows of the tile, every CTA an\n"
                      "//   eighth of the columns (the sums in generate_gemm's order), each value also written into its row's CTA\n"
                      "//   (distributed shared memory); after one cluster barrier CTA c's warp 0 computes {}'s row c there, as\n"
                      "//   that kernel does\n",
                      rk.name, R, rk.name);
  std::string sigs;
  for (size_t i = 0; i < sig.size(); ++i) sigs += fmt::format("{}    {}", i ? ",\n" : "", sig[i]);
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n{}) {{\n", kThreads, k.name, sigs);
  std::string b;
  b += fmt::format("__shared__ float part[{}][{}][{}];  // the GEMM stage's partial sums: [warp][row][column]\n", kWarps, R, 32 * s.JM);
  b += fmt::format("const i64 n0 = (i64)(blockIdx.x / {}) * {};  // the tile's first row\n", kCl, R);
  b += fmt::format("const int rank = blockIdx.x % {};  // the CTA's rank in its cluster (clusters of {} consecutive blocks)\n", kCl, kCl);
  b += "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  b += fmt::format("const int c0 = rank * {};  // the CTA's columns of y: [c0, min(c0 + {}, {}))\n", s.CW, s.CW, s.M);
  b += "mg_cluster_arrive();  // the first half of a barrier: this CTA has started (its lrow may be written from now on)\n";
  b += st.early + kPdlWaitPoint;
  b += prologue;
  b += fmt::format("__shared__ float lrow[{}];  // row n0 + rank of y, whole: each CTA of the cluster writes its columns here\n", s.M);
  // (before the stage's first remote write: every CTA of the cluster has started)
  const std::string outputs = "// output (row i";
  std::string stage = st.stage;
  MINIGPT_CHECK(stage.find(outputs) != std::string::npos, "codegen_cuda: {}: the GEMM stage's outputs not found", k.name);
  stage.insert(stage.find(outputs), "mg_cluster_wait();  // the second half: every CTA of the cluster has started\n");
  b += stage;
  b += "mg_cluster_barrier();  // every CTA's columns of y in their rows' CTAs\n";
  b += "const i64 r = n0 + rank;  // the row of the row-wise part this CTA computes\n";
  b += fmt::format("if (warp == 0 && rank < {} && r < {}) {{  // {}'s row r, a warp, as its own kernel computes it\n", R, s.N, rk.name);
  b += indent_text(row, "  ") + "}\n";
  code += indent_text(b, "  ") + "}\n";
  return code;
}

}  // namespace minigpt::compile::cuda_gen
