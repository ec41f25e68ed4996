// The MLP kernel of the CUDA back end (codegen_cuda_parts.h's generate_mlp): one transformer
// block's MLP (fuse_mlp: layernorm, fc1 + GELU, fc2 + residual), with the attention's projection
// before it (fuse_mlp_proj) and optionally the attention itself (fuse_mlp_attention), as ONE
// kernel: a block per tile of R rows, or a cluster of 8 CTAs per tile sharing the work through
// distributed shared memory. Every sum runs in the order of the kernels apart (generate_gemm's),
// so the values are theirs bitwise. The rest of the back end is codegen_cuda.cpp.
#include "compile/codegen_cuda_parts.h"

#include "compile/codegen_text.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

namespace minigpt::compile::cuda_gen {

namespace {

// One GEMM stage of the MLP kernel (generate_mlp) on the block's tile of R rows: y (R, M) =
// epilogue(a W^T), a (R, K) in the shared array `a`; warp w sums the K slice [w KC, (w + 1) KC)
// (KC = ceil(K / 8)) for the lane's columns lane + 32 j, in order, into part[w] (float4 reads of
// a: the same address for every lane); after a barrier each output (i, m) adds the 8 partials in
// warp order, then the epilogue (bias, GELU or the residual `res_at`): generate_gemm's order, so
// the values of the GEMM kernel apart. `early`: the lane's W slice (as float4s, at most 64
// floats) into {tag}_w and the biases of the outputs the thread stores into {tag}_b, before PDL's
// wait (weights only); `stage`: the rest, whose outputs `store` takes (a statement on v at row i,
// column m; under `store_guard` when non-empty).
struct MlpStage {
  std::string early, stage;
};
MlpStage mlp_gemm_stage(const Graph& g, const Node& n, const std::string& w, const std::string& bias, const std::string& tag, int R,
                        bool weights_early, const std::string& a, const std::string& res_at, const std::string& store,
                        const std::string& store_guard) {
  constexpr int kWarps = 8, kThreads = 32 * kWarps;
  const int64_t K = g.tensor(n.inputs[0]).cols(), M = g.tensor(n.inputs[1]).shape[0];
  const int64_t KC = (K + kWarps - 1) / kWarps, JM = (M + 31) / 32, E = (R * M + kThreads - 1) / kThreads;
  const bool v4 = K % 4 == 0 && KC % 4 == 0;
  const bool w_early = weights_early && v4 && JM * KC <= 64 && g.tensor(n.inputs[1]).kind == TensorKind::Weight;
  const bool b_early = weights_early && n.has_bias && g.tensor(n.inputs[2]).kind == TensorKind::Weight;
  const std::string zero4 = "make_float4(0.0f, 0.0f, 0.0f, 0.0f)";
  MlpStage out;
  std::string& e = out.early;
  if (w_early) {
    e += fmt::format("float4 {}_w[{}][{}];  // W[lane + 32 j][warp {} ..]: the lane's slice, loaded first (a weight)\n", tag, JM, KC / 4, KC);
    e += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j)\n#pragma unroll\n  for (int u = 0; u < {}; ++u) {{\n", JM, KC / 4);
    e += fmt::format("    const int m = lane + 32 * j, kk = warp * {} + 4 * u;\n", KC);
    std::string mask;
    if (M % 32) mask = fmt::format("m < {}", M);
    if (K % kWarps) mask += (mask.empty() ? "" : " && ") + fmt::format("kk < {}", K);
    const std::string load = fmt::format("*(const float4*)({} + (i64)m * {} + kk)", w, K);
    e += mask.empty() ? fmt::format("    {}_w[j][u] = {};\n  }}\n", tag, load)
                      : fmt::format("    {}_w[j][u] = {} ? {} : {};\n  }}\n", tag, mask, load, zero4);
  }
  if (b_early) {
    e += fmt::format("float {}_b[{}];  // the biases of the outputs the thread stores, loaded first\n", tag, E);
    e += fmt::format("#pragma unroll\nfor (int q = 0; q < {}; ++q) {{\n  const int e = threadIdx.x + {} * q;\n", E, kThreads);
    e += (R * M) % kThreads ? fmt::format("  {}_b[q] = e < {} ? {}[e % {}] : 0.0f;\n}}\n", tag, R * M, bias, M)
                            : fmt::format("  {}_b[q] = {}[e % {}];\n}}\n", tag, bias, M);
  }
  std::string b = fmt::format("// {}: warp w sums its K slice of {} for the lane's columns, in order\n", epilogue_text(n), a);
  b += fmt::format("{{\n  float acc[{}][{}];\n#pragma unroll\n  for (int j = 0; j < {}; ++j)\n#pragma unroll\n    for (int i = 0; i < {}; ++i) acc[j][i] = 0.0f;\n",
                   JM, R, JM, R);
  std::string f;
  if (v4) {
    f += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n", KC / 4);
    f += fmt::format("  const int k = warp * {} + 4 * u;\n", KC);
    if (K % kWarps) f += fmt::format("  if (k >= {}) break;  // the last warp's slice ends at K\n", K);
    f += fmt::format("  float4 av[{}];\n#pragma unroll\n  for (int i = 0; i < {}; ++i) av[i] = *(const float4*)&{}[i][k];  // the same for every lane\n",
                     R, R, a);
    f += fmt::format("#pragma unroll\n  for (int j = 0; j < {}; ++j) {{\n", JM);
    if (w_early) f += fmt::format("    const float4 wv = {}_w[j][u];\n", tag);
    else if (M % 32) f += fmt::format("    const float4 wv = lane + 32 * j < {} ? *(const float4*)({} + (i64)(lane + 32 * j) * {} + k) : {};\n", M, w, K, zero4);
    else f += fmt::format("    const float4 wv = *(const float4*)({} + (i64)(lane + 32 * j) * {} + k);\n", w, K);
    f += fmt::format("#pragma unroll\n    for (int i = 0; i < {}; ++i) {{\n", R);
    f += "      acc[j][i] += av[i].x * wv.x;\n      acc[j][i] += av[i].y * wv.y;\n      acc[j][i] += av[i].z * wv.z;\n      acc[j][i] += av[i].w * wv.w;\n";
    f += "    }\n  }\n}\n";
  } else {
    f += fmt::format("for (int k = warp * {0}; k < min({1}, warp * {0} + {0}); ++k) {{\n", KC, K);
    f += fmt::format("#pragma unroll\n  for (int j = 0; j < {}; ++j) {{\n", JM);
    f += M % 32 ? fmt::format("    const float wv = lane + 32 * j < {} ? {}[(i64)(lane + 32 * j) * {} + k] : 0.0f;\n", M, w, K)
                : fmt::format("    const float wv = {}[(i64)(lane + 32 * j) * {} + k];\n", w, K);
    f += fmt::format("#pragma unroll\n    for (int i = 0; i < {}; ++i) acc[j][i] += {}[i][k] * wv;\n  }}\n}}\n", R, a);
  }
  f += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j)\n#pragma unroll\n  for (int i = 0; i < {}; ++i) part[warp][i][lane + 32 * j] = acc[j][i];\n",
                   JM, R);
  b += indent_text(f, "  ") + "}\n__syncthreads();\n";
  b += "// output (row i = e / M, column m = e % M) of the tile: the warps' partial sums in order, the epilogue\n";
  b += fmt::format("#pragma unroll\nfor (int q = 0; q < {}; ++q) {{\n", E);
  std::string o = fmt::format("const int e = threadIdx.x + {} * q, i = e / {}, m = e % {};\n", kThreads, M, M);
  std::string st = "float v = part[0][i][m];\n";
  st += fmt::format("#pragma unroll\nfor (int s = 1; s < {}; ++s) v += part[s][i][m];\n", kWarps);
  std::string epi = epilogue_code(n, "", "m", b_early ? tag + "_b[q]" : "", res_at);
  epi = std::regex_replace(epi, std::regex(R"(\bbias\[)"), bias + "[");
  st += epi + store + "\n";
  std::string guard = (R * M) % kThreads ? fmt::format("e < {}", R * M) : "";
  if (!store_guard.empty()) guard += (guard.empty() ? "" : " && ") + store_guard;
  o += guard.empty() ? st : fmt::format("if ({}) {{  // mask: outputs past the tile's\n", guard) + indent_text(st, "  ") + "}\n";
  b += indent_text(o, "  ") + "}\n";
  out.stage = b;
  return out;
}

// The MLP kernel's cluster form (mlp_cluster; generate_mlp): the weights CTA rank c of its
// cluster loads before PDL's wait: fc1's W1 rows [c HC, (c + 1) HC) (lane l < HC: row c HC + l,
// warp w: fc1's K slice w, as float4s), the biases of the h columns it finishes, W2's columns
// [c HC, (c + 1) HC) for the output (i, m) = (t / M, t % M) thread t sums, the biases of the
// outputs it finishes (y's columns [c MC, (c + 1) MC)).
std::string cluster_early(const Graph& g, const Node& a, const Node& n, int R) {
  constexpr int kCl = 8, kThreads = 256;
  const int64_t K1 = g.tensor(a.inputs[0]).cols(), H = g.tensor(a.output).cols(), M = g.tensor(n.inputs[1]).shape[0];
  const int64_t KC1 = (K1 + 7) / 8, HC = H / kCl, MC = M / kCl;
  const std::string zero4 = "make_float4(0.0f, 0.0f, 0.0f, 0.0f)";
  std::string b = fmt::format("const int hc0 = rank * {};  // the CTA's columns of h: [hc0, hc0 + {})\n", HC, HC);
  b += fmt::format("float4 w1c[{}];  // W1[hc0 + lane][warp {} ..]: fc1's K slice of the lane's column, loaded first (a weight)\n", KC1 / 4, KC1);
  b += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n", KC1 / 4);
  std::string mask = HC < 32 ? fmt::format("lane < {}", HC) : "";
  if (KC1 * 8 != K1) mask += (mask.empty() ? "" : " && ") + fmt::format("warp * {} + 4 * u < {}", KC1, K1);
  const std::string load = fmt::format("*(const float4*)(w1 + (i64)(hc0 + lane) * {} + warp * {} + 4 * u)", K1, KC1);
  b += mask.empty() ? fmt::format("  w1c[u] = {};\n}}\n", load) : fmt::format("  w1c[u] = {} ? {} : {};\n}}\n", mask, load, zero4);
  if (a.has_bias)
    b += R * HC < kThreads
             ? fmt::format("const float b1f = threadIdx.x < {} ? b1[hc0 + threadIdx.x % {}] : 0.0f;  // fc1's bias of the h value it finishes\n",
                           R * HC, HC)
             : fmt::format("const float b1f = b1[hc0 + threadIdx.x % {}];  // fc1's bias of the h value it finishes (one per thread)\n", HC);
  b += fmt::format("float4 w2c[{}];  // W2[m][hc0 ..] of the output (i, m) = (t / {}, t % {}) it sums, loaded first (a weight)\n", HC / 4, M, M);
  b += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u)\n", HC / 4);
  const std::string w2load = fmt::format("*(const float4*)(w2 + (i64)(threadIdx.x % {}) * {} + hc0 + 4 * u)", M, H);
  b += R * M < kThreads    ? fmt::format("  w2c[u] = threadIdx.x < {} ? {} : {};\n", R * M, w2load, zero4)
       : R * M == kThreads ? fmt::format("  w2c[u] = {};  // (the tile's {} outputs fill the block: every thread sums one)\n", w2load, R * M)
                           : fmt::format("  w2c[u] = {};  // (the tile's {} outputs: every thread sums {}, all of column t % {})\n", w2load,
                                         R * M, R * M / kThreads, M);
  if (n.has_bias)
    b += fmt::format("const float b2f = threadIdx.x < {} ? b2[rank * {} + threadIdx.x % {}] : 0.0f;  // fc2's bias of the output it finishes\n",
                     R * MC, MC, MC);
  return b;
}

// The MLP kernel's cluster form after the prologue (xs holds the tile's rows of fc1's x): fc1's
// columns [hc0, hc0 + HC) in fc1's own GEMM's layout and order (warp = K slice, lane = column,
// the slices added in warp order, the epilogue) into hs; fc2's K slice `rank` of every output
// (i, m), summed in order, into pp; a cluster barrier; each CTA finishes y's columns
// [rank MC, (rank + 1) MC): the 8 CTAs' partials read through distributed shared memory in rank
// order (fc2's own GEMM adds its 8 warps' K slices in that order), the epilogue (`res`: "ms",
// the projection's rows; "resc", loaded earlier; or none), the store; a last cluster barrier (no
// CTA exits while another reads its pp).
// `push` (CudaCodegenOptions::mlp_push): each partial written into pq[rank] of the CTA that
// finishes its output instead (st.shared::cluster, after the wait half of a barrier whose arrive
// half is at the kernel's top: every CTA has started), one cluster barrier, the 8 partials read
// from the CTA's own pq in rank order (the same sums in the same order), no last barrier.
// `async` (with push; CudaCodegenOptions::mlp_async): each partial written with st.async, which
// counts its bytes on the receiving CTA's mbarrier pq_bar (initialised at the kernel's top to
// expect the R M partials of its outputs, R M 4 bytes); the CTA's finishing threads wait on
// pq_bar alone instead of a whole cluster barrier (no release fence, no waiting for CTAs whose
// partials it does not need). Same values in the same order.
std::string cluster_stages(const Graph& g, const Node& a, const Node& n, int R, const std::string& res, const std::string& row_guard,
                           bool push, bool async, bool mbar_cta, bool next) {
  constexpr int kCl = 8, kThreads = 256;
  const int64_t K1 = g.tensor(a.inputs[0]).cols(), H = g.tensor(a.output).cols(), M = g.tensor(n.inputs[1]).shape[0];
  const int64_t KC1 = (K1 + 7) / 8, HC = H / kCl, MC = M / kCl;
  std::string b = fmt::format("// fc1: h's columns [hc0, hc0 + {}) of the tile's {} rows; warp w = fc1's K slice w, lane = column\n", HC, R);
  b += fmt::format("__shared__ __align__(16) float hs[{}][{}];\n", R, HC);
  std::string f = fmt::format("float acc[{}];\n#pragma unroll\nfor (int i = 0; i < {}; ++i) acc[i] = 0.0f;\n", R, R);
  f += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n", KC1 / 4);
  f += fmt::format("  const int k = warp * {} + 4 * u;\n", KC1);
  if (KC1 * 8 != K1) f += fmt::format("  if (k >= {}) break;  // the last warp's slice ends at K\n", K1);
  f += "  const float4 wv = w1c[u];\n";
  f += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) {{\n", R);
  f += "    const float4 xv = *(const float4*)&xs[i][k];  // the same for every lane\n";
  f += "    acc[i] += xv.x * wv.x;\n    acc[i] += xv.y * wv.y;\n    acc[i] += xv.z * wv.z;\n    acc[i] += xv.w * wv.w;\n  }\n}\n";
  f += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i) part[warp][i][lane] = acc[i];\n", R);
  b += "{\n" + indent_text(f, "  ") + "}\n__syncthreads();\n";
  b += R * HC < kThreads
           ? fmt::format("if (threadIdx.x < {}) {{  // h value (i, hc0 + l): the slices' partial sums in warp order, the epilogue\n", R * HC)
           : "{  // h value (i, hc0 + l), one per thread: the slices' partial sums in warp order, the epilogue\n";
  std::string h = fmt::format("const int i = threadIdx.x / {}, l = threadIdx.x % {};\n", HC, HC);
  h += "float v = part[0][i][l];\n#pragma unroll\nfor (int s = 1; s < 8; ++s) v += part[s][i][l];\n";
  h += epilogue_code(a, "", "", a.has_bias ? "b1f" : "") + "hs[i][l] = v;\n";
  b += indent_text(h, "  ") + "}\n__syncthreads();\n";
  b += fmt::format("// fc2's K slice `rank` (h's columns [hc0, hc0 + {})) of every output (i, m) = (t / {}, t % {}), summed in order\n", HC, M, M);
  if (push) {  // each partial sum written into the CTA that finishes its output
    b += fmt::format("__shared__ float pq[8][{}][{}];  // [K slice = CTA rank][row][column - first column]: written by the cluster\n", R, MC);
    b += "mg_cluster_wait();  // (the barrier's second half: every CTA of the cluster has started, its pq may be written)\n";
  } else {
    b += fmt::format("__shared__ float pp[{}][{}];  // this CTA's partial sums, read by the cluster\n", R, M);
  }
  std::string p = fmt::format("const int i = threadIdx.x / {}, m = threadIdx.x % {};\nfloat acc = 0.0f;\n", M, M);
  p += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n", HC / 4);
  p += "  const float4 hv = *(const float4*)&hs[i][4 * u], wv = w2c[u];\n";
  p += "  acc += hv.x * wv.x;\n  acc += hv.y * wv.y;\n  acc += hv.z * wv.z;\n  acc += hv.w * wv.w;\n}\n";
  if (async)
    p += fmt::format("mg_cluster_st_async(&pq[rank][i][m % {}], &pq_bar, m / {}, acc);  // into the CTA of column m, counted on its pq_bar\n",
                     MC, MC);
  else
    p += push ? fmt::format("mg_cluster_st(&pq[rank][i][m % {}], m / {}, acc);  // into the CTA of column m\n", MC, MC) : "pp[i][m] = acc;\n";
  // (no guard when the tile's R M outputs fill the block: every thread sums one; more outputs than
  // threads (R M a multiple of the block, the block of M): thread t sums outputs t + 256 q, all of
  // column t % M, whose W2 slice w2c is)
  if (R * M > kThreads) {
    p.replace(0, p.find(";\n") + 2, fmt::format("const int i = (threadIdx.x + {} * q) / {}, m = threadIdx.x % {};\n", kThreads, M, M));
    b += fmt::format("#pragma unroll\nfor (int q = 0; q < {}; ++q) {{  // the thread's outputs (i, m) = ((t + {} q) / {}, t % {})\n",
                     R * M / kThreads, kThreads, M, M) +
         indent_text(p, "  ") + "}\n";
  } else {
    b += R * M < kThreads ? fmt::format("if (threadIdx.x < {}) {{\n", R * M) + indent_text(p, "  ") + "}\n" : "{\n" + indent_text(p, "  ") + "}\n";
  }
  if (!async)
    b += push ? "mg_cluster_barrier();  // every CTA's partial sums in their outputs' CTAs\n"
              : "mg_cluster_barrier();  // every CTA's partial sums visible to the cluster\n";
  b += fmt::format("if (threadIdx.x < {}) {{  // output (i, rank {} + l): the 8 K slices' partials in rank order, the epilogue\n", R * MC, MC);
  std::string o =
      !async     ? ""
      : mbar_cta ? fmt::format("mg_mbar_wait<false>(&pq_bar, 0);  // the {} bytes have landed (acquire at CTA scope: a measuring aid, see "
                               "CudaCodegenOptions::mlp_mbar_cta)\n",
                               R * M * 4)
                 : fmt::format("mg_mbar_wait(&pq_bar, 0);  // the {} bytes of the cluster's partial sums for this CTA's outputs have landed\n",
                               R * M * 4);
  o += fmt::format("const int i = threadIdx.x / {}, m = rank * {} + threadIdx.x % {};\n", MC, MC, MC);
  o += push ? fmt::format("float v = pq[0][i][m % {0}];\n#pragma unroll\nfor (int c = 1; c < 8; ++c) v += pq[c][i][m % {0}];\n", MC)
            : "float v = mg_cluster_ld(&pp[i][m], 0);\n#pragma unroll\nfor (int c = 1; c < 8; ++c) v += mg_cluster_ld(&pp[i][m], c);\n";
  const std::string res_at = res.empty() ? "" : res == "ms" ? "ms[i][m]" : "resc";
  o += epilogue_code(n, "", "m", n.has_bias ? "b2f" : "", res_at);
  const std::string store = fmt::format("y[(n0 + i) * {} + m] = v;\n", M);
  o += row_guard.empty() ? store : fmt::format("if ({}) {}", row_guard, store);
  if (next)  // (every row of the tile, those past N too: ys_bar counts R M floats)
    o += "#pragma unroll\nfor (int c = 0; c < 8; ++c) mg_cluster_st_async(&ys[i][m], &ys_bar, c, v);  // y's row into every CTA (the next layernorm)\n";
  b += indent_text(o, "  ") + "}\n";
  // pull: no CTA may exit while another reads its pp; push: nothing remote is read, none waits
  if (!push) b += "mg_cluster_barrier();  // no CTA exits while another reads its partial sums\n";
  return b;
}

}  // namespace

bool mlp_cluster_fits(const Graph& g, const Kernel& k, int R) {
  const MlpParts parts = mlp_parts(g, k);
  if (!parts.mlp) return false;
  const Node& a = g.nodes[static_cast<size_t>(k.nodes[parts.fc1])];      // fc1
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[parts.fc1 + 1])];  // fc2
  constexpr int kCl = 8, kThreads = 256;
  const int64_t N = g.tensor(a.inputs[0]).rows(), K1 = g.tensor(a.inputs[0]).cols(), H = g.tensor(a.output).cols(),
                M = g.tensor(n.inputs[1]).shape[0], KC1 = (K1 + 7) / 8, HC = H / kCl, MC = M / kCl;
  R = static_cast<int>(std::min<int64_t>(R, N));
  const bool v1 = K1 % 4 == 0 && KC1 % 4 == 0;
  const bool outputs_fit = R * M <= kThreads || (R * M % kThreads == 0 && kThreads % M == 0 && R * HC <= kThreads && R * MC <= kThreads);
  return H % kCl == 0 && HC <= 32 && HC % 4 == 0 && M % kCl == 0 && outputs_fit && v1 && g.tensor(a.inputs[1]).kind == TensorKind::Weight &&
         g.tensor(n.inputs[1]).kind == TensorKind::Weight && (!a.has_bias || g.tensor(a.inputs[2]).kind == TensorKind::Weight) &&
         (!n.has_bias || g.tensor(n.inputs[2]).kind == TensorKind::Weight) &&
         (!parts.next || (parts.proj && n.has_residual && !n.gelu));  // (the tail: after the projection's kernel form)
}

// An MLP as one kernel (passes.h's fuse_mlp; KernelKind::PrologueMatmul whose nodes end in two
// matmuls): fc1 (N, K1) -> h (N, H) with its epilogue (bias, GELU), then fc2 h -> y (N, M) with
// its epilogue (bias, residual); with fuse_mlp_proj first the projection P (N, KP) -> mid (N, M)
// (bias, residual) that fc1's layernorm and fc2's residual read, and with fuse_mlp_attention
// before P the prefill attention computing P's x (attention_stage). A block of 8 warps owns a tile
// of R rows (R = mlp_rows: N / R blocks) and every column of each result, so no value is computed
// twice:
//   before PDL's wait (weights_early; the graph never writes a weight): thread t's rows of W1
//     (h's columns t + 256 j, as float4s) and their biases, each GEMM stage's W slices and biases
//     (mlp_gemm_stage);
//   after it: the residuals (P's, or fc2's when it comes from an earlier kernel); [P's x staged,
//     or the attention's rows computed, and P into ms (shared memory);] x's R rows into xs (fc1's row-wise prologue, a warp per row,
//     reading mid from ms; or x staged);
//   fc1: thread t computes h[i][c] for its columns c and the R rows, K1 split into the 8 slices
//     of fc1's own GEMM kernel (generate_gemm), each summed in order from 0, the slices added in
//     order, then the epilogue: the values that kernel stores; into hs (shared memory);
//   fc2 (and P): mlp_gemm_stage, generate_gemm's order.
// So y is bitwise what the kernels apart give; h (and mid) are never stored.
// Per thread at (R, K1, H, M) = (2, 64, 256, 64): 128 + 128 FMAs (+ 32 for P), 128 weight
// registers (+ 16). This block form streams all of W1 and W2 through each block's SM.
// The cluster form (`cluster_asked` and the shapes fit; the default on sm_90+): a cluster of 8
// CTAs per tile, the same projection and prologue in every CTA, then cluster_early's weights and
// cluster_stages: CTA c computes an eighth of h and fc2's K slice c, the cluster adds the slices;
// the same sums in the same order. Its weights are always loaded before PDL's wait.
std::string generate_mlp(const Graph& g, const Kernel& k, CudaLaunch& launch, bool weights_early, int R, bool cluster_asked, bool push,
                         bool ln_early, bool async, bool mbar_cta, bool next_split) {
  const MlpParts parts = mlp_parts(g, k);
  MINIGPT_CHECK(parts.mlp, "codegen_cuda: {} is not an MLP (its nodes do not end in two matmuls)", k.name);
  const Node& a = g.nodes[static_cast<size_t>(k.nodes[parts.fc1])];      // fc1
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[parts.fc1 + 1])];  // fc2
  const bool next = parts.next;  // the next block's layernorm and qkv after fc2 (fuse_mlp_next)
  const Node* qn = next ? &g.nodes[static_cast<size_t>(k.nodes.back())] : nullptr;  // its qkv matmul
  const int64_t MQ = next ? g.tensor(qn->output).cols() : 0;
  const bool attn = parts.attention, proj = parts.proj;  // the attention before P; the projection P
  const Node* pn = proj ? &g.nodes[static_cast<size_t>(k.nodes[attn ? 1 : 0])] : nullptr;  // the projection P
  const int64_t N = g.tensor(a.inputs[0]).rows(), K1 = g.tensor(a.inputs[0]).cols(), H = g.tensor(a.output).cols(),
                M = g.tensor(n.inputs[1]).shape[0], MP = proj ? g.tensor(pn->inputs[1]).shape[0] : 0;  // MP: P's columns
  constexpr int kWarps = 8, kThreads = 32 * kWarps;
  MINIGPT_CHECK(R >= 1 && R <= kWarps, "codegen_cuda: {}: an MLP tile of {} rows (1 to {})", k.name, R, kWarps);
  R = static_cast<int>(std::min<int64_t>(R, N));  // a tile never has more rows than the matmul (the decode step's 1)
  const int64_t KC1 = (K1 + kWarps - 1) / kWarps;                                   // fc1's K slice
  const int64_t JH = (H + kThreads - 1) / kThreads;                                 // h's columns per thread
  const int64_t E = (R * M + kThreads - 1) / kThreads;                              // outputs stored per thread
  const bool v1 = K1 % 4 == 0 && KC1 % 4 == 0;                                      // float4 K loop
  const bool w1_early = weights_early && v1 && JH * K1 <= 64 && g.tensor(a.inputs[1]).kind == TensorKind::Weight;
  const bool b1_early = weights_early && a.has_bias && g.tensor(a.inputs[2]).kind == TensorKind::Weight;
  const int64_t tiles = (N + R - 1) / R;
  // the cluster form: CTA rank c of a tile's cluster owns h's columns [c HC, (c + 1) HC) (fc2's
  // K slice c) and y's columns [c MC, (c + 1) MC)
  constexpr int kCl = 8;
  const int64_t HC = H / kCl, MC = M / kCl;
  // the cluster form's shapes: h's slice within a warp's lanes, y's columns split 8 ways, the
  // tile's outputs at most one per thread or (below) several of one column, float4 K loops, W1 and
  // W2 graph weights (loaded before PDL's wait); otherwise (explicitly) the block form
  // (more outputs per tile than threads: R M a multiple of the block, the block a multiple of M, so that a
  // thread's outputs share a column; the h values, R HC, and the outputs a CTA finishes, R MC, at most one per thread)
  const bool cluster = cluster_asked && mlp_cluster_fits(g, k, R);
  push = push && cluster;  // fc2's partials pushed (mlp_push): the cluster form only
  async = async && push;    // ... with st.async and an mbarrier (mlp_async)
  MINIGPT_CHECK(!next || (async && proj && n.has_residual && !n.gelu),
                "codegen_cuda: {}: the next block's layernorm and qkv (fuse_mlp_next) need the cluster form with st.async and the projection", k.name);
  launch.function = k.name;
  launch.grid = static_cast<int>(cluster ? tiles * kCl : tiles);
  launch.cluster_dim = cluster ? kCl : 0;
  launch.block = kThreads;
  std::vector<std::string> sig, params;
  const std::string row_guard = N % R ? fmt::format("n0 + i < {}", N) : "";
  std::string prologue;
  std::string ln_w;  // ln_early: the layernorm's gain and bias into registers, before PDL's wait
  MlpStage ps;  // the projection's stage
  if (proj) {
    const int64_t KP = g.tensor(pn->inputs[0]).cols();
    MINIGPT_CHECK(MP == K1, "codegen_cuda: {}: the projection's {} columns are not the layernorm's {}", k.name, MP, K1);
    std::string xstage;  // P's x: the attention's rows (computed here) or x staged
    if (attn) {
      xstage = attention_stage(g, g.nodes[static_cast<size_t>(k.nodes[0])], R, kThreads, "xps", sig, params, launch.args);
    } else {
      sig.push_back("const float* __restrict__ xp");
      launch.args.push_back(pn->inputs[0]);
      params.push_back(fmt::format("xp = {} (the projection's x)", describe(g, pn->inputs[0])));
      xstage = staged_x(N, KP, R, kThreads, "xp", "xps");
      if (KP % 4 == 0) align_shared(xstage, "xps");
    }
    for (const char* p : {"const float* __restrict__ wp", "const float* __restrict__ bp", "const float* __restrict__ rp"}) sig.push_back(p);
    launch.args.insert(launch.args.end(), {pn->inputs[1], pn->has_bias ? pn->inputs[2] : -1, pn->has_residual ? pn->inputs.back() : -1});
    params.push_back(fmt::format("Wp = {}", describe(g, pn->inputs[1])));
    if (pn->has_bias) params.push_back(fmt::format("bp = {}", describe(g, pn->inputs[2])));
    if (pn->has_residual) params.push_back(fmt::format("rp = {} (the projection's residual)", describe(g, pn->inputs.back())));
    params.push_back(fmt::format("mid = {} = {} (the projection, kept in shared memory)", describe(g, pn->output), epilogue_text(*pn)));
    ps = mlp_gemm_stage(g, *pn, "wp", "bp", "proj", R, weights_early, "xps", pn->has_residual ? "rpr[q]" : "", "ms[i][m] = v;", "");
    prologue += xstage;
    prologue += fmt::format("__shared__ __align__(16) float ms[{}][{}];  // the projection's rows: fc1's layernorm and fc2's residual read them\n", R, MP);
    prologue += ps.stage + "__syncthreads();\n";
  }
  if (parts.fc1 > 0) {  // fc1's prologue: the kernel without fc2 (and P, and the next layernorm and qkv) is a prologue GEMM of its own
    Kernel k1 = k;
    k1.nodes.resize(parts.fc1 + 1);
    k1.writes.erase(std::remove_if(k1.writes.begin(), k1.writes.end(),
                                   [&](int t) {
                                     return t == n.output ||
                                            std::find(k1.nodes.begin(), k1.nodes.end(), g.tensor(t).producer) == k1.nodes.end();
                                   }),
                    k1.writes.end());
    if (proj) {  // its input mid from ms
      k1.nodes.erase(k1.nodes.begin(), k1.nodes.begin() + (attn ? 2 : 1));
      k1.reads.push_back(pn->output);
    }
    prologue += rowwise_prologue(g, k1, R, 1, sig, params, launch.args, proj ? pn->output : -1, ln_early ? &ln_w : nullptr);
  } else {
    sig.push_back("const float* __restrict__ x");
    launch.args.push_back(a.inputs[0]);
    params.push_back(fmt::format("x = {}", describe(g, a.inputs[0])));
    prologue += staged_x(N, K1, R, kThreads);
  }
  if (v1) align_shared(prologue, "xs");
  // fc2's residual: mid in ms when P is in the kernel (then no `res` parameter: the body reads ms)
  const bool res_in = n.has_residual && proj && n.inputs.back() == pn->output;
  for (const char* p : {"const float* __restrict__ w1", "const float* __restrict__ b1", "const float* __restrict__ w2",
                        "const float* __restrict__ b2"})
    sig.push_back(p);
  launch.args.insert(launch.args.end(), {a.inputs[1], a.has_bias ? a.inputs[2] : -1, n.inputs[1], n.has_bias ? n.inputs[2] : -1});
  if (n.has_residual && !res_in) {
    sig.push_back("const float* __restrict__ res");
    launch.args.push_back(n.inputs.back());
  }
  sig.push_back("float* __restrict__ y");
  launch.args.push_back(n.output);
  std::string tail;  // fuse_mlp_next: the next layernorm (from ys) and the qkv stage
  std::string ln_next_w;  // ... its gain and bias into registers before PDL's wait (ln_early)
  MlpStage qs;
  if (next) {
    Kernel kt = k;  // the next layernorm and qkv as a prologue GEMM of their own, reading y from shared memory
    kt.nodes.assign(k.nodes.begin() + static_cast<std::ptrdiff_t>(parts.fc1) + 2, k.nodes.end());
    kt.reads.push_back(n.output);
    kt.writes = {qn->output};
    // its inputs named nx_ptr0, ..: fc1's prologue has its own in_ptr0 ..
    const std::string ln =
        rowwise_prologue(g, kt, R, 1, sig, params, launch.args, n.output, ln_early ? &ln_next_w : nullptr, "nx_ptr");
    for (const char* p : {"const float* __restrict__ wq", "const float* __restrict__ bq", "float* __restrict__ yq"}) sig.push_back(p);
    launch.args.insert(launch.args.end(), {qn->inputs[1], qn->has_bias ? qn->inputs[2] : -1, qn->output});
    params.push_back(fmt::format("Wq = {}", describe(g, qn->inputs[1])));
    if (qn->has_bias) params.push_back(fmt::format("bq = {}", describe(g, qn->inputs[2])));
    params.push_back(fmt::format("yq = {} = {} (the next block's qkv: this CTA's share of its columns)", describe(g, qn->output), epilogue_text(*qn)));
    const int64_t KQ = g.tensor(qn->inputs[0]).cols(), KCQ = (KQ + kWarps - 1) / kWarps, QC = MQ / kCl;  // its K, K slice, columns per CTA
    next_split = next_split && MQ % kCl == 0 && QC <= 32 && KQ % 4 == 0 && KCQ % 4 == 0 && KCQ * kWarps == KQ && R * QC <= kThreads;
    if (next_split) {  // CTA rank: qkv's columns [rank QC, (rank + 1) QC), lane = column, warp = K slice (cluster_stages' fc1 layout)
      qs.early = fmt::format("float4 nxt_w[{}];  // Wq[rank {} + lane][warp {} ..]: the lane's column's K slice, loaded first (a weight)\n",
                             KCQ / 4, QC, KCQ);
      qs.early += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u)\n", KCQ / 4);
      const std::string load = fmt::format("*(const float4*)(wq + (i64)(rank * {} + lane) * {} + warp * {} + 4 * u)", QC, KQ, KCQ);
      qs.early += QC < 32 ? fmt::format("  nxt_w[u] = lane < {} ? {} : make_float4(0.0f, 0.0f, 0.0f, 0.0f);\n", QC, load)
                          : fmt::format("  nxt_w[u] = {};\n", load);
      if (qn->has_bias)
        qs.early += fmt::format("const float nxt_bf = threadIdx.x < {} ? bq[rank * {} + threadIdx.x % {}] : 0.0f;  // the bias of the qkv value it finishes\n",
                                R * QC, QC, QC);
      std::string f = fmt::format("float acc[{}];\n#pragma unroll\nfor (int i = 0; i < {}; ++i) acc[i] = 0.0f;\n", R, R);
      f += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n  const int k = warp * {} + 4 * u;\n  const float4 wv = nxt_w[u];\n", KCQ / 4, KCQ);
      f += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) {{\n", R);
      f += "    const float4 xv = *(const float4*)&xs[i][k];  // the same for every lane\n";
      f += "    acc[i] += xv.x * wv.x;\n    acc[i] += xv.y * wv.y;\n    acc[i] += xv.z * wv.z;\n    acc[i] += xv.w * wv.w;\n  }\n}\n";
      f += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i) part[warp][i][lane] = acc[i];\n", R);
      qs.stage = fmt::format("// {}: qkv's columns [rank {}, (rank + 1) {}) of the tile's {} rows; warp w = the K slice w, lane = column\n",
                             epilogue_text(*qn), QC, QC, R);
      qs.stage += "{\n" + indent_text(f, "  ") + "}\n__syncthreads();\n";
      qs.stage += fmt::format("if (threadIdx.x < {}) {{  // value (i, rank {} + l): the slices' partial sums in warp order, the epilogue\n", R * QC, QC);
      std::string o = fmt::format("const int i = threadIdx.x / {0}, l = threadIdx.x % {0}, m = rank * {0} + l;\n", QC);
      o += "float v = part[0][i][l];\n#pragma unroll\nfor (int s = 1; s < 8; ++s) v += part[s][i][l];\n";
      o += epilogue_code(*qn, "", "m", qn->has_bias ? "nxt_bf" : "");
      const std::string st = fmt::format("yq[(n0 + i) * {} + m] = v;\n", MQ);
      o += row_guard.empty() ? st : fmt::format("if ({}) {}", row_guard, st);
      qs.stage += indent_text(o, "  ") + "}\n";
    } else {  // every CTA all of qkv's columns of the tile (generate_gemm's layout), storing its share c % 8 == rank
      qs = mlp_gemm_stage(g, *qn, "wq", "bq", "nxt", R, true, "xs", "", fmt::format("yq[(n0 + i) * {} + m] = v;", MQ),
                          row_guard.empty() ? "m % 8 == rank" : "m % 8 == rank && " + row_guard);
    }
    tail = fmt::format("// the next block's layernorm of the tile's rows of y (every CTA: ys holds them) and its matmul\n"
                       "mg_mbar_wait(&ys_bar, 0);  // the {} bytes of the tile's rows of y have landed\n",
                       R * M * 4);
    std::string t = fmt::format("float (*ms)[{}] = ys;  // (the layernorm reads its input here)\n", M) + ln + qs.stage;
    align_shared(t, "xs");
    tail += "{\n" + indent_text(t, "  ") + "}\n";
  }
  params.push_back(fmt::format("W1 = {}", describe(g, a.inputs[1])));
  if (a.has_bias) params.push_back(fmt::format("b1 = {}", describe(g, a.inputs[2])));
  params.push_back(fmt::format("h = {} = {} (fc1, kept in shared memory)", describe(g, a.output), epilogue_text(a)));
  params.push_back(fmt::format("W2 = {}", describe(g, n.inputs[1])));
  if (n.has_bias) params.push_back(fmt::format("b2 = {}", describe(g, n.inputs[2])));
  if (n.has_residual) params.push_back(fmt::format("residual = {}{}", describe(g, n.inputs.back()), res_in ? " (the projection's, in ms)" : ""));
  params.push_back(fmt::format("y = {} = {} (fc2)", describe(g, n.output), epilogue_text(n)));
  const std::string res2 = !n.has_residual ? "" : res_in ? "ms[i][m]" : weights_early ? "resr[q]" : fmt::format("res[(n0 + i) * {} + m]", M);
  const MlpStage fc2 = cluster ? MlpStage{}
                               : mlp_gemm_stage(g, n, "w2", "b2", "fc2", R, weights_early, "hs", res2,
                                                fmt::format("y[(n0 + i) * {} + m] = v;", M), row_guard);
  // the GEMM stages' partial sums, part[warp][row][column], declared once at the top (every stage
  // uses it in turn): the block form's widest stage (fc2's M or P's columns), the cluster form's
  // (fc1's slice of h, a warp wide, or P's columns)
  const int64_t part_cols =
      cluster ? 32 * std::max<int64_t>(1, (std::max(proj ? MP : 1, next_split ? 1 : MQ) + 31) / 32) : 32 * ((std::max(M, MP) + 31) / 32);
  std::string code = kernel_comment(g, k, params,
                                    cluster ? fmt::format("grid {} (row tiles of {}, a cluster of {} CTAs each: CTA c owns h's columns "
                                                          "[c {}, (c + 1) {}) and fc2's K slice c), block {}",
                                                          launch.grid, R, kCl, HC, HC, kThreads)
                                            : fmt::format("grid {} (row tiles of {}), block {} (fc1: a thread per column of h; {}fc2: 8 "
                                                          "warps splitting K into slices, lane = column)",
                                                          launch.grid, R, kThreads, proj ? "the projection and " : ""));
  if (cluster && push)
    code += async ? "//   fc2's partial sums pushed into the CTAs that finish them with st.async, each CTA waiting on its own mbarrier for them\n"
                  : "//   fc2's partial sums pushed into the CTAs that finish them (distributed shared memory stores): one cluster barrier\n";
  if (next)
    code += fmt::format("//   then the next block's layernorm and its matmul ({} columns): y's rows pushed into every CTA of the cluster (st.async),\n"
                        "//   every CTA the layernorm of the tile's rows, then {}\n",
                        MQ, next_split ? fmt::format("CTA c the matmul's columns [c {}, (c + 1) {})", MQ / kCl, MQ / kCl)
                                       : "every CTA all of the matmul's sums, storing its columns c % 8 == rank");
  if (cluster_asked && !cluster)
    code += fmt::format("//   (not in clusters: H {}, M {}, K1 {}, {} rows per tile do not fit the cluster form; a block per tile)\n", H, M, K1, R);
  code += fmt::format("//   the MLP as one kernel: {} its {} rows of {}x (the prologue), of h = fc1's result\n"
                      "//   (shared memory, never stored) and of y, {}; the sums in the order of the GEMMs' own kernels\n",
                      cluster ? "each cluster computes" : "each block computes", R,
                      attn ? "the attention and the projection (shared memory, never stored), of "
                      : proj ? "the projection (shared memory, never stored), of "
                             : "",
                      cluster ? "every CTA an eighth of h's columns and of y's" : "every column");
  std::string sigs;
  for (size_t i = 0; i < sig.size(); ++i) sigs += fmt::format("{}    {}", i ? ",\n" : "", sig[i]);
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n{}) {{\n", kThreads, k.name, sigs);
  std::string b;
  b += cluster ? fmt::format("const i64 n0 = (i64)(blockIdx.x / {}) * {};  // the tile's first row\n", kCl, R) +
                     fmt::format("const int rank = blockIdx.x % {};  // the CTA's rank in its cluster (clusters of {} consecutive blocks)\n", kCl, kCl)
               : fmt::format("const i64 n0 = (i64)blockIdx.x * {};  // the tile's first row\n", R);
  b += "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  b += fmt::format("__shared__ float part[{}][{}][{}];  // the GEMM stages' partial sums: [warp][row][column]\n", kWarps, R, part_cols);
  // ---- weights first
  const std::string zero4 = "make_float4(0.0f, 0.0f, 0.0f, 0.0f)";
  if (cluster) {
    if (async) {
      b += "__shared__ __align__(8) unsigned long long pq_bar;  // counts the bytes of the partial sums pushed into pq\n";
      b += fmt::format("if (threadIdx.x == 0) mg_mbar_init_tx(&pq_bar, {});  // (before the arrive below: no CTA pushes before every CTA "
                       "has arrived)\n",
                       R * M * 4);
    }
    if (next) {
      b += fmt::format("__shared__ __align__(16) float ys[{}][{}];  // the tile's rows of y, pushed by the cluster (the next layernorm's input)\n", R, M);
      b += "__shared__ __align__(8) unsigned long long ys_bar;  // counts the bytes of y pushed into ys\n";
      b += fmt::format("if (threadIdx.x == 0) mg_mbar_init_tx(&ys_bar, {});\n", R * M * 4);
    }
    if (push) b += "mg_cluster_arrive();  // the first half of a barrier: this CTA has started (its pq may be written from now on)\n";
    b += cluster_early(g, a, n, R);
  } else if (w1_early) {
    b += fmt::format("float4 w1r[{}][{}];  // fc1: rows threadIdx.x + {} j of W1, loaded first (a weight)\n", JH, K1 / 4, kThreads);
    b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j)\n#pragma unroll\n  for (int u = 0; u < {}; ++u) {{\n", JH, K1 / 4);
    b += fmt::format("    const int c = threadIdx.x + {} * j;\n", kThreads);
    const std::string load = fmt::format("*(const float4*)(w1 + (i64)c * {} + 4 * u)", K1);
    b += H % kThreads ? fmt::format("    w1r[j][u] = c < {} ? {} : {};\n  }}\n", H, load, zero4) : fmt::format("    w1r[j][u] = {};\n  }}\n", load);
  }
  if (b1_early && !cluster) {
    b += fmt::format("float b1r[{}];  // fc1's bias of the thread's columns, loaded first\n", JH);
    b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) ", JH);
    b += H % kThreads ? fmt::format("b1r[j] = threadIdx.x + {0} * j < {1} ? b1[threadIdx.x + {0} * j] : 0.0f;\n", kThreads, H)
                      : fmt::format("b1r[j] = b1[threadIdx.x + {} * j];\n", kThreads);
  }
  b += ps.early + fc2.early + ln_w + qs.early + ln_next_w;
  if (w1_early || b1_early || !ps.early.empty() || !fc2.early.empty() || !ln_w.empty() || cluster) b += kPdlWaitPoint;
  // residuals from earlier kernels (P's; fc2's unless it is P's result), loaded right after the wait
  auto residuals = [&](const std::string& name, const std::string& ptr) {
    std::string r = fmt::format("float {}[{}];  // the residuals of the outputs the thread stores, loaded right after the wait\n", name, E);
    r += fmt::format("#pragma unroll\nfor (int q = 0; q < {}; ++q) {{\n  const int e = threadIdx.x + {} * q;\n", E, kThreads);
    std::string m = (R * M) % kThreads ? fmt::format("e < {}", R * M) : "";
    if (N % R) m += (m.empty() ? "" : " && ") + fmt::format("n0 + e / {} < {}", M, N);
    const std::string load = fmt::format("{}[(n0 + e / {}) * {} + e % {}]", ptr, M, M, M);
    r += m.empty() ? fmt::format("  {}[q] = {};\n}}\n", name, load) : fmt::format("  {}[q] = {} ? {} : 0.0f;\n}}\n", name, m, load);
    return r;
  };
  if (proj && pn->has_residual) b += residuals("rpr", "rp");
  if (weights_early && n.has_residual && !res_in && !cluster) b += residuals("resr", "res");
  if (cluster && n.has_residual && !res_in) {  // the residual of the output the thread finishes
    b += fmt::format("const int ic = threadIdx.x / {0}, mc = rank * {0} + threadIdx.x % {0};\n", MC);
    b += fmt::format("const float resc = threadIdx.x < {} && n0 + ic < {} ? res[(n0 + ic) * {} + mc] : 0.0f;  // loaded right after the wait\n",
                     R * MC, N, M);
  }
  b += prologue;
  if (cluster) {
    b += cluster_stages(g, a, n, R, n.has_residual ? (res_in ? "ms" : "resc") : "", row_guard, push, async, mbar_cta, next);
    return code + indent_text(b + tail, "  ") + "}\n";
  }
  // ---- fc1
  b += fmt::format("// fc1: h = {} of the tile's {} rows into hs, a thread per column of h\n", epilogue_text(a), R);
  b += fmt::format("__shared__ __align__(16) float hs[{}][{}];\n", R, H);
  b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", JH);
  std::string c = fmt::format("const int c = threadIdx.x + {} * j;\n", kThreads);
  std::string cb;
  cb += fmt::format("float v[{}], p[{}];\n", R, R);
  cb += fmt::format("#pragma unroll\nfor (int s = 0; s < 8; ++s) {{  // fc1's K slices [s {}, (s + 1) {}) in order\n", KC1, KC1);
  cb += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) p[i] = 0.0f;\n", R);
  if (v1) {
    cb += fmt::format("#pragma unroll\n  for (int u = 0; u < {}; ++u) {{\n", KC1 / 4);
    cb += fmt::format("    const int k = s * {} + 4 * u;\n", KC1);
    cb += w1_early ? "    const float4 wv = w1r[j][k / 4];\n" : fmt::format("    const float4 wv = *(const float4*)(w1 + (i64)c * {} + k);\n", K1);
    cb += fmt::format("#pragma unroll\n    for (int i = 0; i < {}; ++i) {{\n", R);
    cb += "      const float4 xv = *(const float4*)&xs[i][k];  // one 16-byte shared read, the same for every thread\n";
    cb += "      p[i] += xv.x * wv.x;\n      p[i] += xv.y * wv.y;\n      p[i] += xv.z * wv.z;\n      p[i] += xv.w * wv.w;\n    }\n  }\n";
  } else {
    cb += fmt::format("#pragma unroll\n  for (int kk = 0; kk < {}; ++kk) {{\n", KC1);
    cb += fmt::format("    const int k = s * {} + kk;\n", KC1);
    if (KC1 * kWarps != K1) cb += fmt::format("    if (k >= {}) break;  // the last slices end at K\n", K1);
    cb += fmt::format("    const float wv = w1[(i64)c * {} + k];\n", K1);
    cb += fmt::format("#pragma unroll\n    for (int i = 0; i < {}; ++i) p[i] += xs[i][k] * wv;\n  }}\n", R);
  }
  cb += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) v[i] = s == 0 ? p[i] : v[i] + p[i];\n}}\n", R);
  cb += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i) {{\n", R);
  cb += "  float vi = v[i];\n";
  std::string epi = epilogue_code(a, "", "c", b1_early ? "b1r[j]" : "");
  epi = std::regex_replace(epi, std::regex(R"(\bv\b)"), "vi");
  epi = std::regex_replace(epi, std::regex(R"(\bbias\[)"), "b1[");
  cb += indent_text(epi, "  ") + "  hs[i][c] = vi;\n}\n";
  c += H % kThreads ? fmt::format("if (c < {}) {{\n", H) + indent_text(cb, "  ") + "}\n" : cb;
  b += indent_text(c, "  ") + "}\n__syncthreads();\n";
  // ---- fc2
  b += fc2.stage;
  return code + indent_text(b, "  ") + "}\n";
}

}  // namespace minigpt::compile::cuda_gen
