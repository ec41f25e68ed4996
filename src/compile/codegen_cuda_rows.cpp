// The rows form of the CUDA back end (codegen_cuda_rows.h): the row-locality analysis, the
// stage plan, the generated kernel text and the weight image's layout.
#include "compile/codegen_cuda_rows.h"

#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

namespace minigpt::compile {

namespace {

// The device helpers every generated rows kernel starts with (NVRTC cannot include the project's
// headers: these are the ideas of kernels/cuda/bulk_copy.cuh and gpt_mega_parts.cuh written again,
// in the same arithmetic, as codegen_cuda_mega.cpp's kMegaPrelude is for the megakernel form).
// The prelude in pieces (generate_rows joins them): the plain form's (rows-plain: the text before
// the ports from gpt_mega_rows.cu's kVar variants) or the default's.
const char* kPreludeBase = R"(
// ---- rows form helpers (sm_90: thread-block clusters, mbarriers, bulk copies, st.async) -----
#define RW_FULL 0xffffffffu
__device__ __forceinline__ unsigned rw_smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned rw_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
// mbarriers: one arrival per phase; bulk copies and st.async complete their bytes on them
__device__ __forceinline__ void rw_bar_init(unsigned long long* b) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(rw_smem(b)) : "memory"); }
__device__ __forceinline__ void rw_fence_bar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void rw_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(rw_smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void rw_wait(unsigned long long* b, unsigned parity) {
  asm volatile("{\n.reg .pred done;\nRW_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra RW_WAIT;\n}\n"
               ::"r"(rw_smem(b)), "r"(parity) : "memory");
}
// the k, v hand-over: one relaxed arrival announcing the bytes the other CTAs' st.async bring,
// and every thread's wait acquiring them at cluster scope
__device__ __forceinline__ void rw_kv_arrive(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(rw_smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void rw_kv_wait(unsigned long long* b, unsigned parity) {
  asm volatile("{\n.reg .pred done;\nRW_KVWAIT:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n@!done bra RW_KVWAIT;\n}\n"
               ::"r"(rw_smem(b)), "r"(parity) : "memory");
}
// `bytes` (a multiple of 16) from global src into shared dst by the copy engine, completing on b
__device__ __forceinline__ void rw_bulk(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(rw_smem(dst)), "l"(src), "r"(bytes), "r"(rw_smem(b)) : "memory");
}
__device__ __forceinline__ unsigned rw_mapa(const void* local, unsigned rank) {
  unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(rw_smem(local)), "r"(rank)); return r;
}
__device__ __forceinline__ void rw_st_async4(unsigned remote, float4 v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(remote), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_bar) : "memory");
}
// cluster barrier halves: the arrival relaxed (it announces that this CTA is done reading its k, v
// buffers, or that its mbarriers exist: fence.mbarrier_init publishes those), the wait acquiring
__device__ __forceinline__ void rw_cluster_arrive() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void rw_cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
// exact-erf GELU (as kernels/cuda/gelu.cuh)
__device__ __forceinline__ float rw_gelu(float x) {
  if (x == -CUDART_INF_F) return -0.0f;
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}
)";
// rw_dot, both texts from one: the plain text's k loop unrolled by 4; the default's fully for
// K <= 64 (kFull). rw_text substitutes the @NAME@ markers.
const char* kPreludeDotText = R"(// sum over k in [0, K) of a[k] * w_j[k] for J weight rows side by side, k in order from 0, one FMA
// chain each (a: a broadcast over the warp; w: 16-byte aligned)@DOC@
template <int K, int J>
__device__ __forceinline__ void rw_dot(const float* a, const float* const (&w)[J], float (&acc)[J]) {
@DECL@#pragma unroll
  for (int j = 0; j < J; ++j) acc[j] = 0.0f;
#pragma unroll @UNROLL@
  for (int k = 0; k < K; k += 4) {
    const float4 av = *reinterpret_cast<const float4*>(a + k);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 wv = *reinterpret_cast<const float4*>(w[j] + k);
      acc[j] = fmaf(av.x, wv.x, acc[j]);
      acc[j] = fmaf(av.y, wv.y, acc[j]);
      acc[j] = fmaf(av.z, wv.z, acc[j]);
      acc[j] = fmaf(av.w, wv.w, acc[j]);
    }
  }
}
)";
// the statistics: kPreludeLnText's @STATS@ (rows-plain's; the default text's are kLnGather's)
const char* kLnButterfly = R"(#pragma unroll
  for (int off = 8; off > 0; off >>= 1) {
    s += __shfl_xor_sync(RW_FULL, s, off);
    q += __shfl_xor_sync(RW_FULL, q, off);
  }
  const double inv_c = 1.0 / static_cast<double>(C);
  const double m = s * inv_c;
  const double var = fmax(q * inv_c - m * m, 0.0);
  const float mean = static_cast<float>(m), rstd = rsqrtf(static_cast<float>(var + static_cast<double>(eps)));
)";
// the default text's statistics (ln15; the SASS reading above kPreludeLds1 says why each step keeps the bits)
const char* kLnGather = R"(  // the butterfly's tree in 2 rounds of 3 gathered lanes: round 1 its steps 8 and 4, round 2
  // its steps 2 and 1 (the same additions of the same operands)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int o1 = r == 0 ? 8 : 2, o2 = r == 0 ? 4 : 1;
    const double s1 = __shfl_xor_sync(RW_FULL, s, o1), s2 = __shfl_xor_sync(RW_FULL, s, o2), s3 = __shfl_xor_sync(RW_FULL, s, o1 | o2);
    const double q1 = __shfl_xor_sync(RW_FULL, q, o1), q2 = __shfl_xor_sync(RW_FULL, q, o2), q3 = __shfl_xor_sync(RW_FULL, q, o1 | o2);
    s = (s + s1) + (s2 + s3);
    q = (q + q1) + (q2 + q3);
  }
  const double inv_c = 1.0 / static_cast<double>(C);
  const double m = s * inv_c;
  const double var = fmax(q * inv_c - m * m, 0.0);
  const float xr = static_cast<float>(var + static_cast<double>(eps));
  const float mean = static_cast<float>(m), rstd = eps >= 1.17549435e-38f ? rw_rsqrt_normal(xr) : rsqrtf(xr);
)";
const std::vector<std::pair<std::string, std::string>> kDotPlain = {{"@DOC@", ""}, {"@DECL@", ""}, {"@UNROLL@", "4"}};
const std::vector<std::pair<std::string, std::string>> kDotDefault = {
    {"@DOC@", ". For K <= 64 the k loop is fully\n"
              "// unrolled, so the later float4 loads issue while the chain runs (K > 64: unrolled by 4); the same\n"
              "// FMAs in the same order either way"},
    {"@DECL@", "  constexpr int kUnroll = K <= 64 ? K / 4 : 4;\n"},
    {"@UNROLL@", "kUnroll"}};
// rw_layernorm, both texts from one: the default's gain and bias loaded with the row (kVarLnHoist)
const char* kPreludeLnText = R"(// LayerNorm of one row of C (a multiple of 16) by a half-warp (the calling warp; lanes 16..31
// compute the same and write nothing): the statistics in double in one pass, a 16-lane butterfly,
// the variance E[x^2] - mean^2 clamped at 0, 1/sigma a float rsqrtf@DOC@
template <int C>
__device__ __forceinline__ void rw_layernorm(const float* x, float* out, const float* w, const float* b, float eps) {
  constexpr int E = C / 16;
  const int sub = threadIdx.x & 15;
  float v[E]@REGS@;
  double dv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) @LOAD@
  double s, q;
  if constexpr (E == 4) {
    s = (dv[0] + dv[1]) + (dv[2] + dv[3]);
    q = fma(dv[0], dv[0], dv[1] * dv[1]) + fma(dv[2], dv[2], dv[3] * dv[3]);
  } else {
    s = 0.0; q = 0.0;
#pragma unroll
    for (int e = 0; e < E; ++e) { s += dv[e]; q = fma(dv[e], dv[e], q); }
  }
@STATS@  @STORE@
#pragma unroll
    for (int e = 0; e < E; ++e) out[sub + 16 * e] = (v[e] - mean) * rstd * @WB@;
  }
}
)";
const std::vector<std::pair<std::string, std::string>> kLnPlain = {
    {"@DOC@", " (gpt_mega_parts.cuh's\n// layernorm_rows_t and row_stats, the same arithmetic)"},
    {"@REGS@", ""},
    {"@LOAD@", "{ v[e] = x[sub + 16 * e]; dv[e] = v[e]; }"},
    {"@STATS@", kLnButterfly},
    {"@STORE@", "if ((threadIdx.x & 31) < 16) {"},
    {"@WB@", "w[sub + 16 * e] + b[sub + 16 * e]"}};
const std::vector<std::pair<std::string, std::string>> kLnDefault = {
    {"@DOC@", ". The gain and bias are loaded\n"
              "// WITH the row, before the statistics: loaded after them, each w[c], b[c] could wait for the\n"
              "// previous element's store wherever the compiler cannot tell out from w and b apart (here all are\n"
              "// constant offsets from one base, so it may already load them early; this does not rely on that)"},
    {"@REGS@", ", wv[E], bv[E]"},
    {"@LOAD@", "{\n    v[e] = x[sub + 16 * e];\n    wv[e] = rw_lds1(w + sub + 16 * e);\n    bv[e] = rw_lds1(b + sub + 16 * e);\n    dv[e] = v[e];\n  }"},
    {"@STATS@", kLnGather},
    {"@STORE@", "{  // every lane: lanes 16..31 store lanes 0..15's values (no branch for the loads to sink into)"},
    {"@WB@", "wv[e] + bv[e]"}};
// rw_layernorm_parts (the deferred matmuls' LayerNorm: proj by heads, fc2 by slices): rw_layernorm's text
// (the default's) with its row formed while loaded: the S partials of column c (parts + j C + c) added
// in slice order, + bias, + residual (the deferred matmul's epilogue, the same additions in the same
// order), stored to mid where a later stage reads it; the statistics then as rw_layernorm's
const std::vector<std::pair<std::string, std::string>> kLnParts = {
    {"@DOC@", ". The gain and bias loaded\n"
              "// with the row. rw_layernorm_parts: the row x itself formed from a deferred matmul's k-slice partials\n"
              "// (parts + j C), added in slice order, + bias, + residual, as that matmul's stage did, and stored (mid)"},
    {"@REGS@", ", wv[E], bv[E]"},
    {"@LOAD@", "{\n    const int c = sub + 16 * e;\n    float xe = parts[c];\n#pragma unroll\n    for (int j = 1; j < S; ++j) xe = xe + parts[j * C + c];\n"
               "    if constexpr (BIAS) xe = xe + bias[c];\n    if constexpr (RES) xe = xe + res[c];\n"
               "    if constexpr (MID) { if ((threadIdx.x & 31) < 16) mid[c] = xe; }\n"
               "    v[e] = xe;\n    wv[e] = rw_lds1(w + c);\n    bv[e] = rw_lds1(b + c);\n    dv[e] = v[e];\n  }"},
    {"@STATS@", kLnGather},
    {"@STORE@", "{  // every lane: lanes 16..31 store lanes 0..15's values (no branch for the loads to sink into)"},
    {"@WB@", "wv[e] + bv[e]"}};
const char* kLnSignature = "template <int C>\n__device__ __forceinline__ void rw_layernorm(const float* x, float* out, const float* w, const float* b, float eps) {";
const char* kLnPartsSignature =
    "template <int C, int S, bool BIAS, bool RES, bool MID>\n__device__ __forceinline__ void rw_layernorm_parts(const float* parts, const float* bias, "
    "const float* res, float* mid, float* out, const float* w, const float* b, float eps) {";
std::string rw_text(std::string t, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [marker, with] : subs) {
    const size_t at = t.find(marker);
    MINIGPT_CHECK(at != std::string::npos && t.find(marker, at + 1) == std::string::npos, "rows prelude: marker {} not once", marker);
    t.replace(at, marker.size(), with);
  }
  return t;
}
const char* kPreludeQk = R"(// a score before its scale: q . k over dh (a multiple of 4) in e order, one FMA chain
template <int DH>
__device__ __forceinline__ float rw_dot_qk(const float* q, const float* k) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < DH; e += 4) {
    const float4 qv = *reinterpret_cast<const float4*>(q + e);
    const float4 kv = *reinterpret_cast<const float4*>(k + e);
    s = fmaf(qv.x, kv.x, s); s = fmaf(qv.y, kv.y, s); s = fmaf(qv.z, kv.z, s); s = fmaf(qv.w, kv.w, s);
  }
  return s;
}
)";
// the default's: the attention's max by redux.sync (kVarRedux); bitwise the plain butterfly's
const char* kPreludeMax = R"(// the warp's max of s by ONE redux.sync (where a butterfly takes 5 dependent shuffle + fmaxf
// steps): the floats' bits mapped to ints in the floats' order (non-negative ones as they are,
// negative ones with the magnitude bits flipped; -0 just below +0, either a max of 0 giving the same
// s - max). A max is exact in any order: the butterfly's value (a NaN score makes the row NaN
// either way)
__device__ __forceinline__ float rw_warp_max(float s) {
  const int bits = __float_as_int(s);
  const int key = __reduce_max_sync(RW_FULL, bits >= 0 ? bits : bits ^ 0x7fffffff);
  return __int_as_float(key >= 0 ? key : key ^ 0x7fffffff);
}
)";
// attention2_text's: a shared-memory float4 load the compiler cannot sink into a branch (volatile asm
// is emitted where written, in order with the other volatile asm: after the k, v wait)
const char* kPreludeLds4 = R"(// a float4 from shared memory, loaded where written (the attention: every v row's load issued before
// the scores; a plain load is sunk by the compiler into the `k < nk` branch of its FMAs, which makes
// each key's shared-memory latency a step of the chain)
__device__ __forceinline__ float4 rw_lds4(const float* p) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(rw_smem(p)));
  return v;
}
)";

// The default text's LayerNorm statistics (issue 15, ln15; rows-ln2 while it was a variant: measured
// kernel 16.62 against 16.90 us, 19.14 / 19.52 per replay alone, gpu_final15): rw_layernorm's and
// rw_layernorm_parts' text rewritten from kPreludeLnText's (rows-plain keeps that one), the same values
// bitwise. What kPreludeLnText's sm_90a SASS showed (nvcc 13.0, nvdisasm; stage 5 of the shipped (2, 16)):
// the chain is LDS x4 -> F2F.F64.F32 x4 (a 64-bit conversion: 16 per clock per SM, a warp's one takes 8
// issue cycles on its SM sub-partition) -> DMUL/DFMA/DADD -> 4 butterfly steps, each 4 SHFL (s and q are
// two 32-bit halves each) then a DADD, so 4 dependent SHFL + DADD latencies -> DMUL, DFMA, DSETP.MAX +
// selects + a NaN fix-up (fmax of a double) -> DADD eps -> F2F.F32.F64 -> FSETP + @!P FMUL, MUFU.RSQ, @!P
// FMUL (rsqrtf's denormal scaling) -> FMUL, FFMA -> STS; the gain and bias loads are sunk past the
// butterfly into the lanes < 16 branch (issued after the statistics, not with the row). Here:
//   - the 16-lane sum in 2 dependent rounds, not 4: round 1 gathers s, q of lanes l ^ 8, l ^ 4, l ^ 12
//     and forms (s + s8) + (s4 + s12), which is the butterfly's value after its steps 8 and 4 (lane l
//     after step 8 holds p_l + p_{l^8}, lane l ^ 4 p_{l^4} + p_{l^12}, and step 4 adds the two); round 2
//     likewise over l ^ 2, l ^ 1, l ^ 3: (b + b2) + (b1 + b3), the butterfly's steps 2 and 1. The same
//     additions of the same operands (an IEEE addition is commutative: the butterfly's lanes agree too);
//     12 SHFL a round instead of 4 a step;
//   - 1/sigma by rsqrt.approx.ftz.f32 where eps >= FLT_MIN: its argument float(var + eps) >= eps (var =
//     fmax(.., 0) is >= 0 or +inf, never a NaN) is normal or +inf, where rsqrtf's denormal scaling does
//     nothing: the same MUFU.RSQ of the same float;
//   - every lane stores (lanes 16..31 the same values as lanes 0..15 to the same addresses: the xor
//     offsets < 16 keep the halves apart), so there is no lanes < 16 branch for ptxas to sink the gain
//     and bias loads into (it sank them even as volatile asm, rw_lds1); they are loaded with the row.
// (Tried: the clamp as t > 0 ? t : 0: ptxas emits the same DSETP.MAX sequence.)
const char* kPreludeLds1 = R"(// a float from shared memory, loaded where written (the LayerNorm's gain and bias with
// the row; a plain load is sunk past the statistics into the storing lanes' branch)
__device__ __forceinline__ float rw_lds1(const float* p) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(rw_smem(p)));
  return v;
}
// 1/sqrt(x) for a normal (or infinite) x: rsqrtf's MUFU.RSQ without its denormal scaling
__device__ __forceinline__ float rw_rsqrt_normal(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
)";

// ---- the analysis ----

enum class Kind : uint8_t { None, Row, Weight, Ids };

std::string node_text(const Graph& g, int i) {
  const Node& n = g.nodes[static_cast<size_t>(i)];
  return fmt::format("node %{} {} ('{}')", n.output, op_name(n.op), g.tensor(n.output).name);
}

}  // namespace

std::string row_local_refusal(const Graph& g, int64_t& B, int64_t& T) {
  // the rows N: the graph's outputs' (every output is a row tensor)
  MINIGPT_CHECK(!g.outputs.empty(), "rows: a graph without outputs");
  const int64_t N = g.tensor(g.outputs[0]).rows();
  B = T = 0;
  for (const Node& n : g.nodes) {
    if (n.op == Op::Attention && T == 0 && g.tensor(n.inputs[0]).shape.size() == 3) {
      B = g.tensor(n.inputs[0]).shape[0];
      T = g.tensor(n.inputs[0]).shape[1];
    }
  }
  if (T == 0)
    for (const Node& n : g.nodes)
      if (n.op == Op::PosEmbedding && T == 0) T = n.period;
  if (T == 0) T = 1;  // no sequence: every row alone
  if (N <= 0 || N % T != 0) return fmt::format("{} output rows are not sequences of {} rows", N, T);
  B = N / T;
  // each tensor's kind: a row tensor (N rows, row n produced from row n), a whole weight, the ids
  std::vector<Kind> kind(g.tensors.size(), Kind::None);
  for (int t : g.weights) kind[static_cast<size_t>(t)] = Kind::Weight;
  for (int t : g.inputs) {
    const TensorInfo& ti = g.tensor(t);
    if (ti.dtype == DType::I32 && ti.numel() == N) kind[static_cast<size_t>(t)] = Kind::Ids;  // else None: a node reading it is refused
  }
  auto is = [&](int t, Kind k) { return kind[static_cast<size_t>(t)] == k; };
  auto row = [&](int t) { return is(t, Kind::Row) && g.tensor(t).rows() == N; };
  // a weight of one value per column of `cols` (a bias, a gain)
  auto column_vector = [&](int t, int64_t cols) { return is(t, Kind::Weight) && g.tensor(t).numel() == cols; };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const int out = n.output;
    const int64_t cols = g.tensor(out).cols();
    std::string why;
    if (n.runtime_offset) {
      why = "a runtime position (a decode step) is not a forward over whole sequences";
    } else if (n.op == Op::Embedding) {
      if (!is(n.inputs[0], Kind::Ids) || !is(n.inputs[1], Kind::Weight)) why = "a gather not by the row's token id from a weight";
    } else if (n.op == Op::PosEmbedding) {
      if (n.period != T || n.offset != 0 || !is(n.inputs[0], Kind::Weight) || g.tensor(out).rows() != N)
        why = fmt::format("a position gather of period {} offset {}: not row n's position n % {}", n.period, n.offset, T);
    } else if (n.op == Op::Matmul) {
      // out row n = x row n times a whole weight (+ bias, + residual row n)
      const int64_t M = cols;
      size_t k = 2;
      if (!row(n.inputs[0]) || !is(n.inputs[1], Kind::Weight)) why = "a matmul not of a row tensor by a weight";
      if (why.empty() && n.has_bias && !column_vector(n.inputs[k++], M)) why = "a matmul bias that is not a weight vector";
      if (why.empty() && n.has_residual && (!row(n.inputs[k]) || g.tensor(n.inputs[k]).cols() != M)) why = "a residual that is not a row tensor";
    } else if (kPointwise.contains(n.op)) {
      for (size_t a = 0; a < n.inputs.size() && why.empty(); ++a) {
        const int t = n.inputs[a];
        const bool same_row = row(t) && (g.tensor(t).cols() == cols || g.tensor(t).cols() == 1);
        if (!same_row && !column_vector(t, cols)) why = fmt::format("operand '{}' is neither row n of a row tensor nor a column vector", g.tensor(t).name);
      }
    } else if (kReduction.contains(n.op) || n.op == Op::Softmax) {
      if (!row(n.inputs[0])) why = "a row reduction of a tensor that is not a row tensor";
    } else if (n.op == Op::LayerNorm) {
      const int64_t C = g.tensor(n.inputs[0]).cols();
      if (!row(n.inputs[0]) || !column_vector(n.inputs[1], C) || !column_vector(n.inputs[2], C)) why = "a layernorm not of a row tensor by weight vectors";
    } else if (n.op == Op::Attention) {
      // the one exception: row t of a sequence reads rows 0..t of its qkv (causal, from position 0)
      const TensorInfo& q = g.tensor(n.inputs[0]);
      if (data_inputs(n) != 1) why = "an attention over a KV cache (a decode step)";
      else if (n.offset != 0) why = fmt::format("an attention from position {} (not a whole sequence)", n.offset);
      else if (!row(n.inputs[0]) || q.shape.size() != 3 || q.shape[0] != B || q.shape[1] != T) why = "an attention whose qkv is not (B, T, 3C) of row tensors";
    } else {
      why = "not a row-local op (nor the causal attention)";
    }
    if (!why.empty()) return fmt::format("{}: {}", node_text(g, static_cast<int>(i)), why);
    kind[static_cast<size_t>(out)] = Kind::Row;
  }
  for (int t : g.outputs)
    if (!row(t)) return fmt::format("output '{}' is not a row tensor", g.tensor(t).name);
  return "";
}

namespace {

// S k-slices per output for a matmul of M outputs over K: at most kSliceThreads threads in the
// sliced form (the hand-written kernel's choice: proj and fc2 by 4 slices, the other matmuls one
// chain), slices of at least 16 k, a multiple of 4; 1: one chain. (512 threads, fc1 by 2 slices and
// fc2 by 8, measured slower on the H200: 25.95 against 22.59 us per replay, experiments/25-compile/
// gpu_rows15/NOTE.md; removed.)
constexpr int kSliceThreads = 256;
int slices_for(int64_t K, int64_t M) {
  for (int s : {8, 4, 2})
    if (M * s <= kSliceThreads && K % (4 * s) == 0 && K / s >= 16) return s;
  return 1;
}

int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

// Shared memory for the activation rows: first fit over blocks freed by earlier stages.
struct RowAlloc {
  struct Block {
    int64_t at, size;
  };
  std::vector<Block> free;
  int64_t end = 0;
  int64_t take(int64_t n) {
    n = round4(n);
    for (size_t i = 0; i < free.size(); ++i)
      if (free[i].size >= n) {
        const int64_t at = free[i].at;
        free[i].at += n;
        free[i].size -= n;
        if (free[i].size == 0) free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
        return at;
      }
    const int64_t at = end;
    end += n;
    return at;
  }
  // a block taken before and not yet given back (two live rows never share floats)
  void give(int64_t at, int64_t n) {
    n = round4(n);
    MINIGPT_CHECK(at >= 0 && at + n <= end, "rows: shared-memory block [{}, {}) was never taken", at, at + n);
    for (const Block& b : free)
      MINIGPT_CHECK(at + n <= b.at || b.at + b.size <= at, "rows: shared-memory block [{}, {}) freed twice (free: [{}, {}))", at, at + n, b.at,
                    b.at + b.size);
    free.push_back({at, n});
  }
};

constexpr int kBarSmall = kRowsMaxSlots, kBarKv = kRowsMaxSlots + 1, kNbars = kRowsMaxSlots + 2;  // the mbarriers: a slot's each, then these

// The shared-memory layout and the weight image's layout of a plan's stages: what generate_rows
// writes and what plan_rows checks fits (the ring's slots beside the activations).
struct RowsLayout {
  std::map<int, int> stage_of;  // tensor -> the stage computing it
  std::map<int, int> last_use;  // tensor -> the last stage reading it
  std::vector<std::vector<int>> reads;  // per stage: the earlier stages' tensors it reads (each once)
  std::map<int, int64_t> small_at;  // a 1-D weight -> its offset in the small block (floats)
  int64_t small = 0;  // the small block's floats
  std::vector<CudaImageCopy> image;
  std::vector<int64_t> piece_off;  // piece i: floats [piece_off[i], piece_off[i + 1]) of the image
  int64_t image_floats = 0;
  int64_t C_att = 0, ldk = 0;  // the attentions' width (plan_rows: all one) and k, v rows' stride
  std::map<int, int64_t> buf;  // tensor -> its row in shared memory
  std::vector<int64_t> q_at;  // per kv matmul stage: its q row
  int64_t ks = 0, vs = 0, red = 0, bars = 0, ring = 0;  // offsets (floats)
  int ns = 0, most = 1;  // ring slots that fit; the most pieces one stage reads
  int64_t smem_bytes = 0;
  std::map<int, int64_t> part;  // a deferred matmul stage (rows_deferrals) -> its partials' block (S x M floats)
};

// defer[s] != 0 (rows_deferrals; empty: none): matmul stage s's k-slice partials are computed by stage
// s - 1 and its epilogue by stage s + 1 (a LayerNorm): its reads (the residual) live to s + 1, its
// partials' block from s - 1 to s + 1, and stage s - 1 reads its pieces (with its own, if any).
RowsLayout rows_layout(const RowsPlan& p, const std::vector<int>& defer = {}) {
  const Graph& g = p.graph;
  RowsLayout L;
  // which stage computes each tensor, and which stages read it (the inlined trees' leaves)
  for (size_t s = 0; s < p.stages.size(); ++s) L.stage_of[g.nodes[static_cast<size_t>(p.stages[s].node)].output] = static_cast<int>(s);
  L.reads.resize(p.stages.size());
  for (size_t s = 0; s < p.stages.size(); ++s) {
    std::set<int> inside;
    for (int k : p.stages[s].nodes) inside.insert(g.nodes[static_cast<size_t>(k)].output);
    for (int k : p.stages[s].nodes)
      for (int t : g.nodes[static_cast<size_t>(k)].inputs)
        if (!inside.count(t) && L.stage_of.count(t)) {
          L.last_use[t] = static_cast<int>(s);
          // once (x + x W^T's residual is the matmul's input; x * x): its row is freed once
          if (std::find(L.reads[s].begin(), L.reads[s].end(), t) == L.reads[s].end()) L.reads[s].push_back(t);
        }
  }
  auto deferred = [&](size_t s) { return s < defer.size() && defer[s] != 0; };
  for (size_t s = 0; s < p.stages.size(); ++s)
    if (deferred(s))
      for (int t : L.reads[s]) {
        L.last_use[t] = std::max(L.last_use[t], static_cast<int>(s) + 1);
        if (std::find(L.reads[s + 1].begin(), L.reads[s + 1].end(), t) == L.reads[s + 1].end()) L.reads[s + 1].push_back(t);
      }

  // the image: every 1-D weight a stage reads (in first-use order) in the small block, then the
  // matmuls' pieces in consumption order
  auto add_small = [&](int t) {
    if (L.small_at.count(t)) return;
    L.small_at[t] = L.small;
    const int64_t n = g.tensor(t).numel();
    L.image.push_back({t, 0, 0, 1, n, L.small, n});
    L.small += round4(n);
  };
  for (const RowsStage& st : p.stages)
    for (int k : st.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(k)];
      if (n.op == Op::Embedding || n.op == Op::PosEmbedding) continue;  // tables: read from global memory
      for (size_t a = 0; a < n.inputs.size(); ++a) {
        const int t = n.inputs[a];
        if (g.tensor(t).kind == TensorKind::Weight && !(n.op == Op::Matmul && a == 1)) add_small(t);
      }
    }
  L.small = round4(L.small);
  int64_t at = L.small;
  for (const RowsStage& st : p.stages) {
    if (st.kind != RowsStage::Kind::Matmul) continue;
    const int w = g.nodes[static_cast<size_t>(st.node)].inputs[1];
    for (int pc = 0; pc < st.pieces; ++pc) {
      const int64_t r0 = static_cast<int64_t>(pc) * st.rows_per_piece, rows = std::min<int64_t>(st.rows_per_piece, st.M - r0);
      L.piece_off.push_back(at);
      L.image.push_back({w, r0, 0, rows, st.K, at, st.ld});
      at += rows * st.ld;
    }
  }
  L.piece_off.push_back(at);
  L.image_floats = at;

  // shared memory (floats): the small block, the activation rows, k and v of every row of the
  // sequence, the softmax's per-warp values, the mbarriers, then the ring
  for (const RowsStage& st : p.stages)
    if (st.kind == RowsStage::Kind::Attention) L.C_att = g.tensor(g.nodes[static_cast<size_t>(st.node)].output).cols();
  L.ldk = L.C_att + 4;
  RowAlloc alloc;
  alloc.end = L.small;
  L.q_at.assign(p.stages.size(), -1);
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const RowsStage& st = p.stages[s];
    const int out = g.nodes[static_cast<size_t>(st.node)].output;
    if (st.kind == RowsStage::Kind::Matmul && st.kv) {
      L.q_at[s] = alloc.take(st.M / 3);  // q only: k and v go to the sequence's rows below
      L.buf[out] = L.q_at[s];
    } else if (L.last_use.count(out)) {
      L.buf[out] = alloc.take(g.tensor(out).cols());
    }
    if (deferred(s + 1)) L.part[static_cast<int>(s) + 1] = alloc.take(p.stages[s + 1].slices * p.stages[s + 1].M);
    for (int t : L.reads[s])
      if (L.last_use[t] == static_cast<int>(s) && L.buf.count(t))
        alloc.give(L.buf[t], st.kind == RowsStage::Kind::Attention ? L.C_att : g.tensor(t).cols());
    if (s > 0 && deferred(s - 1)) alloc.give(L.part[static_cast<int>(s) - 1], p.stages[s - 1].slices * p.stages[s - 1].M);
  }
  int64_t o = round4(alloc.end);
  L.ks = o;
  o += p.attentions ? p.T * L.ldk : 0;
  L.vs = o;
  o += p.attentions ? p.T * L.ldk : 0;
  L.red = o;
  o += 2 * (kRowsThreads / 32);
  L.bars = o;
  o += 2 * kNbars;
  L.ring = round4(o);
  const int64_t fit = (kRowsSmemBudget / 4 - L.ring) / kRowsSlotFloats;
  L.ns = static_cast<int>(std::min<int64_t>(fit, kRowsMaxSlots));
  for (size_t s = 0; s < p.stages.size(); ++s)
    L.most = std::max(L.most, p.stages[s].pieces + (deferred(s + 1) ? p.stages[s + 1].pieces : 0));
  L.smem_bytes = (L.ring + static_cast<int64_t>(L.ns) * kRowsSlotFloats) * 4;
  return L;
}

// The deferred matmuls (generate_rows' default text: fuse = both kinds; codegen_cuda_rows.h): per stage 0, or
// kRowsFuseProjHeads / kRowsFuseMlpSlices where matmul stage s (k-sliced, S > 1; not a qkv; no
// GELU; not a graph output) is read first by stage s + 1, a LayerNorm of its output (later stages
// may read it: the LayerNorm stores it), and its k-slices line up with stage s - 1's warps:
//   kRowsFuseProjHeads: stage s - 1 is the attention producing its input, its heads its slices
//     (S = heads, K / S = dh), M a multiple of 32 of at most 128 (M / 32 outputs per lane);
//   kRowsFuseMlpSlices: stage s - 1 is a one-chain matmul producing its input (its K outputs, one
//     per thread: K <= the CTA's threads), slice j's K / S columns whole warps (a multiple of 32)
//     computing slice j's M <= K / S partials after a named barrier of theirs (S <= 15 barriers).
// The rest keeps its stage.
std::vector<int> rows_deferrals(const RowsPlan& p) {
  const Graph& g = p.graph;
  std::vector<int> d(p.stages.size(), 0);
  for (size_t s = 1; s + 1 < p.stages.size(); ++s) {
    const RowsStage &pr = p.stages[s - 1], &mm = p.stages[s], &ln = p.stages[s + 1];
    if (d[s - 1] != 0 || mm.kind != RowsStage::Kind::Matmul || mm.kv || mm.slices < 2 || ln.kind != RowsStage::Kind::LayerNorm) continue;
    const Node& n = g.nodes[static_cast<size_t>(mm.node)];
    if (n.gelu || g.is_graph_output(n.output) || g.nodes[static_cast<size_t>(ln.node)].inputs[0] != n.output) continue;
    if (g.nodes[static_cast<size_t>(pr.node)].output != n.inputs[0]) continue;
    const int S = mm.slices;
    const int64_t ks = mm.K / S;
    if (pr.kind == RowsStage::Kind::Attention) {
      const Node& a = g.nodes[static_cast<size_t>(pr.node)];
      const int64_t dh = g.tensor(a.output).cols() / a.heads;
      if (a.heads == S && dh == ks && mm.M % 32 == 0 && mm.M <= 128) d[s] = kRowsFuseProjHeads;
    } else if (pr.kind == RowsStage::Kind::Matmul && !pr.kv && pr.slices == 1) {
      if (pr.M == mm.K && pr.M <= kRowsThreads && ks % 32 == 0 && mm.M <= ks && S <= 15) d[s] = kRowsFuseMlpSlices;
    }
  }
  return d;
}

}  // namespace

RowsPlan plan_rows(const Graph& captured) {
  RowsPlan p;
  Graph g = captured;
  verify(g, "capture");
  g = fuse_attention(std::move(g));
  verify(g, "fuse_attention");
  g = matmul_epilogue(std::move(g));
  verify(g, "matmul_epilogue");
  g = remove_dead(std::move(g));
  verify(g, "remove_dead");
  p.refused = row_local_refusal(g, p.B, p.T);
  p.N = p.B * p.T;
  if (!p.refused.empty()) {
    p.graph = std::move(g);
    return p;
  }
  // a refusal leaves p as the analysis' does: the reason, the graph, no stages
  auto refuse = [&](std::string why) {
    p.refused = std::move(why);
    p.stages.clear();
    p.attentions = 0;
    p.graph = g;
    return p;
  };
  if (p.T > kRowsMaxCluster) return refuse(fmt::format("T = {} rows per sequence: a cluster holds at most {} CTAs (one row each)", p.T, kRowsMaxCluster));
  if (p.N > 65535)
    return refuse(fmt::format("{} rows: more than 65535 CTAs (one per row), the most this generator launches (larger grids not tried)", p.N));
  // the stages: pointwise nodes read by exactly one pointwise node (and not outputs) are inlined
  // into it; every other node is a stage
  const NodeUsers users(g);
  auto inlined = [&](const Node& n) {
    if (!kPointwise.contains(n.op) && !kGather.contains(n.op)) return false;
    if (g.is_graph_output(n.output)) return false;
    const auto us = users.of(n.output);
    return us.size() == 1 && kPointwise.contains(g.nodes[static_cast<size_t>(us[0])].op);
  };
  int piece = 0;
  int64_t att_C = 0;  // the attentions' width
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (inlined(n)) continue;
    RowsStage st;
    st.node = static_cast<int>(i);
    const int64_t cols = g.tensor(n.output).cols();
    // the nodes of an inlined tree: walk back from the root
    std::vector<int> todo{static_cast<int>(i)};
    std::set<int> tree;
    while (!todo.empty()) {
      const int k = todo.back();
      todo.pop_back();
      tree.insert(k);
      for (int t : g.nodes[static_cast<size_t>(k)].inputs) {
        const int pr = g.tensor(t).producer;
        if (pr >= 0 && inlined(g.nodes[static_cast<size_t>(pr)])) todo.push_back(pr);
      }
    }
    st.nodes.assign(tree.begin(), tree.end());
    // a one-column node reading a weight (its one value) is generated as a column vector's sm[off + c]
    for (int k : st.nodes) {
      const Node& m = g.nodes[static_cast<size_t>(k)];
      if (!kPointwise.contains(m.op) || g.tensor(m.output).cols() != 1) continue;
      for (int t : m.inputs)
        if (g.tensor(t).kind == TensorKind::Weight)
          return refuse(fmt::format("{}: a one-column pointwise op reading weight '{}' (the generator reads weights per column)", node_text(g, k),
                                    g.tensor(t).name));
    }
    // a layernorm's or an attention's row is written out from its shared-memory row, which exists
    // only when a later stage reads it
    if ((n.op == Op::LayerNorm || n.op == Op::Attention) && g.is_graph_output(n.output) && users.of(n.output).empty())
      return refuse(fmt::format("{}: a {} whose output is only a graph output (not generated)", node_text(g, st.node), op_name(n.op)));
    if (kPointwise.contains(n.op) || kGather.contains(n.op)) {
      st.kind = RowsStage::Kind::Pointwise;
    } else if (n.op == Op::LayerNorm) {
      st.kind = RowsStage::Kind::LayerNorm;
      if (cols % 16 != 0) return refuse(fmt::format("{}: a layernorm of {} columns (a multiple of 16 needed)", node_text(g, st.node), cols));
    } else if (n.op == Op::Softmax) {
      st.kind = RowsStage::Kind::Softmax;
    } else if (n.op == Op::Matmul) {
      st.kind = RowsStage::Kind::Matmul;
      st.K = g.tensor(n.inputs[0]).cols();
      st.M = cols;
      const auto us = users.of(n.output);
      st.kv = us.size() == 1 && g.nodes[static_cast<size_t>(us[0])].op == Op::Attention;
      if (st.kv && (n.gelu || n.has_residual)) return refuse(fmt::format("{}: a qkv matmul with a GELU or residual", node_text(g, st.node)));
      if (st.kv && g.is_graph_output(n.output)) return refuse(fmt::format("{}: a qkv matmul that is also a graph output (not written)", node_text(g, st.node)));
      if (!st.kv)
        for (int u : us)
          if (g.nodes[static_cast<size_t>(u)].op == Op::Attention)
            return refuse(fmt::format("{}: the attention's qkv is read by other ops too", node_text(g, st.node)));
      if (st.K % 32 != 0) return refuse(fmt::format("{}: K = {} (a multiple of 32 needed)", node_text(g, st.node), st.K));
      st.slices = st.kv ? 1 : slices_for(st.K, st.M);
      st.ld = static_cast<int>(st.K + 4);  // 8 consecutive rows: 8 distinct 16-byte bank groups
      st.rows_per_piece = static_cast<int>(std::min<int64_t>(st.M, kRowsSlotFloats / st.ld));
      if (st.rows_per_piece < 1) return refuse(fmt::format("{}: a weight row of {} floats exceeds a ring slot", node_text(g, st.node), st.K));
      st.pieces = static_cast<int>((st.M + st.rows_per_piece - 1) / st.rows_per_piece);
      st.first_piece = piece;
      piece += st.pieces;
    } else if (n.op == Op::Attention) {
      st.kind = RowsStage::Kind::Attention;
      st.attention = p.attentions++;
      const int64_t C = cols, dh = C / n.heads;
      std::string bad;
      if (C % 32 != 0) bad = fmt::format("C = {}: a multiple of 32 needed", C);
      else if (C % n.heads != 0 || dh % 4 != 0) bad = fmt::format("C = {} over {} heads: heads of a multiple of 4 columns needed", C, n.heads);
      else if (dh > 128) bad = fmt::format("dh = {}: at most 128 columns per head (a lane's 4 per head)", dh);
      else if (n.heads > kRowsThreads / 32) bad = fmt::format("{} heads: at most {} (a warp each)", n.heads, kRowsThreads / 32);
      if (!bad.empty()) return refuse(fmt::format("{}: {}", node_text(g, st.node), bad));
      if (p.attentions > 1 && C != att_C)
        return refuse(fmt::format("{}: C = {}, an earlier attention's {} (the k, v rows are laid out for one width)", node_text(g, st.node), C, att_C));
      att_C = C;
      // the qkv matmul before it hands over k and v
      const int qkv = g.tensor(n.inputs[0]).producer;
      bool found = false;
      for (RowsStage& s : p.stages)
        if (s.node == qkv && s.kind == RowsStage::Kind::Matmul && s.kv) s.attention = st.attention, found = true;
      if (!found) return refuse(fmt::format("{}: its qkv is not a matmul of its own", node_text(g, st.node)));
      if (3 * C > kRowsThreads) return refuse(fmt::format("{}: 3C = {} outputs exceed the CTA's threads", node_text(g, st.node), 3 * C));
    } else {
      return refuse(fmt::format("{}: row-local, but the rows generator has no stage for it", node_text(g, st.node)));
    }
    p.stages.push_back(st);
  }
  p.graph = std::move(g);
  // the generator's shared memory: the most pieces one stage reads must fit the ring beside the
  // activations (rows_layout, as generate_rows lays it out)
  if (const RowsLayout L = rows_layout(p); L.ns < L.most) {
    p.refused = fmt::format("a stage reads {} weight pieces but only {} ring slots (of {} B) fit beside {} B of activations", L.most,
                            std::max(L.ns, 0), kRowsSlotFloats * 4, L.ring * 4);
    p.stages.clear();
    p.attentions = 0;
  }
  return p;
}

// ---- the generator ----

namespace {

std::string ident(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "t_" + s;
  return s;
}

}  // namespace

namespace {

// The default text's attention body (issue 15, att15; rows-plain keeps its own, generate_rows' plain
// branch), inside the stage's `if (warp < H)` after its hh, nk, qt and e (a warp per head; T keys at
// most, W the power of two >= T); `stamp(name)` a trace line ("" untraced). It replaced the previous
// default body (kVarRedux and kVarKeys: the scores by rw_dot_qk, the max by redux.sync, the sum's
// butterfly over W lanes, the key loop unrolled with its v loads at row min(k, nk - 1)), removed once
// this one measured faster (H200, experiments/25-compile/gpu_att15/call1: kernel 16.91 us against
// 18.12). What that body's sm_90a SASS showed (nvcc 13.0 -arch=sm_90a on the shipped model's text):
// the key loop's v loads, written unconditional, were sunk by the compiler into each key's `k < nk`
// branch (there min(k, nk - 1) = k), so 15 of the 16 keys ran LDS.128 -> 4 FFMA in series (a
// shared-memory latency per key); and the sum of exp was 4 dependent SHFL.BFLY + FADD, then the 16
// keys' SHFL.IDX of the probabilities. Here:
//   - every key's v row is loaded first (rw_lds4: volatile asm, not sunk), before the scores, so the
//     loads complete under the scores, the max and the exp;
//   - the exps of the W lanes are gathered into every lane by W independent shuffles (pipelined, one
//     latency), and the sum is the butterfly's tree written out: the butterfly at offsets W/2, .., 1
//     (the plain text's from 16: the lanes >= W hold exp = 0, adding them changes no value) leaves in
//     lane 0 F(L, 0) with F(0, i) = ex_i and F(L, i) = F(L-1, i) + F(L-1, i ^ (W >> L)) (the lane's own
//     value first, as `sum += shfl_xor(sum, o)` adds), and every lane < W holds the same bits
//     (a + b = b + a): the same sum, the same 1.0f / sum;
//   - the probability of key k is ek[k] * (1.0f / sum), the plain text's `ex * (1.0f / sum)` in lane
//     k, the same product (no shuffle left in the key loop); the FMAs the same, in key order, under k < nk.
// So every value is the plain text's, bit for bit (the GPU test RowsFormDefaultAndPlainTextsAgreeBitwise).
std::string attention2_text(int64_t T, int64_t dh, int64_t ks, int64_t vs, int64_t ldk, float scale,
                            const std::function<std::string(const std::string&)>& stamp) {
  int W = 1;
  while (W < T) W *= 2;
  int levels = 0;
  while ((1 << levels) < W) ++levels;
  std::function<std::string(int, int)> tree = [&](int l, int i) -> std::string {
    if (l == 0) return fmt::format("ek[{}]", i);
    return fmt::format("({} + {})", tree(l - 1, i), tree(l - 1, i ^ (W >> l)));
  };
  std::string b;
  b += fmt::format(
      "    // every key's v row first (row min(k, nk - 1), a row that is there; rw_lds4 is not sunk\n"
      "    // into the FMAs' branch): the loads complete under the scores, the max and the exp\n"
      "    float4 vv[{0}];\n#pragma unroll\n    for (int k = 0; k < {0}; ++k) vv[k] = rw_lds4(sm + {1} + min(k, nk - 1) * {2} + e);\n",
      T, vs, ldk);
  b += fmt::format(
      "    // the score of key `lane` as rw_dot_qk<{0}> computes it (the same FMAs, in e order), on the k row min(lane,\n"
      "    // nk - 1) loaded unconditionally (no branch: the loads above and these in one block), then selected\n"
      "    float4 kr[{1}];\n#pragma unroll\n    for (int i = 0; i < {1}; ++i) kr[i] = rw_lds4(sm + {2} + min(lane, nk - 1) * {3} + hh * {0} + 4 * i);\n"
      "    float d = 0.0f;\n#pragma unroll\n    for (int i = 0; i < {1}; ++i) {{\n"
      "      const float4 qv = *reinterpret_cast<const float4*>(qt + 4 * i);\n"
      "      d = fmaf(qv.x, kr[i].x, d); d = fmaf(qv.y, kr[i].y, d); d = fmaf(qv.z, kr[i].z, d); d = fmaf(qv.w, kr[i].w, d);\n    }}\n"
      "    const float sc = lane < nk ? d * {4:.9g}f : -CUDART_INF_F;\n",
      dh, dh / 4, ks, ldk, scale);
  b += stamp("q.k scores (warp 0 = head 0; the v loads issued)");
  b += "    const float m = rw_warp_max(sc);  // exact: one redux.sync\n";
  b += stamp("max (redux.sync)");
  b += "    // exp on every lane (lanes >= nk: expf(-inf) = 0, never kept), then selected: no branch\n"
       "    const float xe = expf(sc - m);\n    const float ex = lane < nk ? xe : 0.0f;\n";
  b += fmt::format(
      "    // the exps of lanes < {0} in every lane ({0} independent shuffles), their sum in the default butterfly's\n"
      "    // order (offsets {1}..1: lane 0's tree, which every lane < {0} holds), the probabilities ek[k] / sum as\n"
      "    // the default's ex * (1.0f / sum) in lane k\n"
      "    float ek[{0}];\n#pragma unroll\n    for (int k = 0; k < {0}; ++k) ek[k] = __shfl_sync(RW_FULL, ex, k);\n"
      "    const float rs = 1.0f / {2};\n",
      W, std::max(W / 2, 1), levels == 0 ? std::string("ek[0]") : tree(levels, 0));
  b += stamp("exp, sum, 1/sum (the gather)");
  b += fmt::format(
      "    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);\n"
      "#pragma unroll\n    for (int k = 0; k < {}; ++k) {{  // att = probabilities times v, in key order\n"
      "      const float pk = ek[k] * rs;\n"
      "      if (k < nk) {{\n"
      "        acc.x = fmaf(pk, vv[k].x, acc.x); acc.y = fmaf(pk, vv[k].y, acc.y); acc.z = fmaf(pk, vv[k].z, acc.z); acc.w = fmaf(pk, vv[k].w, acc.w);\n"
      "      }}\n    }}\n",
      T);
  return b;
}

}  // namespace

CudaCode generate_rows(const RowsPlan& p, Schedule& sched, bool plain, bool trace) {
  const bool headw = !plain;  // the head waits per chain, not prewaited (codegen_cuda_rows.h, "The head's waits")
  MINIGPT_CHECK(p.refused.empty(), "generate_rows: the graph was refused: {}", p.refused);
  const Graph& g = p.graph;
  const int NT = kRowsThreads, NW = NT / 32;
  CudaCode code;
  code.graph_hash = graph_hash(g);

  // the deferred matmuls (rows_deferrals: every one that lines up in the default text; none in the
  // plain text), and the layouts (rows_layout: plan_rows checked that the ring fits without
  // deferrals; with them a stage reads its pieces and the deferred matmul's: where those do not fit
  // the ring, no deferral at all)
  std::vector<int> defer = plain ? std::vector<int>(p.stages.size(), 0) : rows_deferrals(p);
  RowsLayout L = rows_layout(p, defer);
  if (L.ns < L.most) {
    defer.assign(p.stages.size(), 0);
    L = rows_layout(p);
  }
  const bool any_defer = std::any_of(defer.begin(), defer.end(), [](int d) { return d != 0; });
  // the pieces each stage reads: a matmul's own, with a deferred matmul after it its pieces too
  // (an attention before a deferred matmul: only those)
  std::vector<int> rd_a(p.stages.size(), 0), rd_e(p.stages.size(), 0);
  for (size_t s = 0; s < p.stages.size(); ++s)
    if (p.stages[s].kind == RowsStage::Kind::Matmul && !defer[s]) rd_a[s] = p.stages[s].first_piece, rd_e[s] = p.stages[s].first_piece + p.stages[s].pieces;
  for (size_t s = 1; s < p.stages.size(); ++s)
    if (defer[s]) {
      if (rd_e[s - 1] == rd_a[s - 1]) rd_a[s - 1] = p.stages[s].first_piece;
      rd_e[s - 1] = p.stages[s].first_piece + p.stages[s].pieces;
    }
  MINIGPT_CHECK(L.ns >= L.most, "rows: a stage reads {} weight pieces but only {} ring slots fit beside {} B of activations", L.most, L.ns,
                L.ring * 4);
  const std::map<int, int64_t>& small_at = L.small_at;
  const std::map<int, int64_t>& buf = L.buf;
  const std::vector<int64_t>& q_at = L.q_at;
  const std::vector<int64_t>& piece_off = L.piece_off;
  const int64_t small = L.small, ks = L.ks, vs = L.vs, ldk = L.ldk, red = L.red, bars = L.bars, ring = L.ring, smem_bytes = L.smem_bytes;
  const int ns = L.ns, nbars = kNbars;
  const int pieces = static_cast<int>(piece_off.size()) - 1;
  code.image = L.image;
  code.image_floats = L.image_floats;

  // kernel parameters: the ids and the gathers' tables, the outputs, the image
  std::vector<int> args;
  std::map<int, std::string> pname;
  auto param = [&](int t) {
    if (pname.count(t)) return pname[t];
    std::string nm = ident(g.tensor(t).name);
    for (const auto& [k, v] : pname)
      if (v == nm) nm += fmt::format("_{}", t);
    pname[t] = nm;
    args.push_back(t);
    return nm;
  };
  for (const RowsStage& st : p.stages)
    for (int k : st.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(k)];
      if (n.op == Op::Embedding) param(n.inputs[0]), param(n.inputs[1]);
      if (n.op == Op::PosEmbedding) param(n.inputs[0]);
    }
  for (int t : g.outputs) param(t);
  std::string sig;
  for (int t : args) {
    const TensorInfo& ti = g.tensor(t);
    const bool in = ti.kind != TensorKind::Output && !g.is_graph_output(t);
    sig += fmt::format("{}    {}{}* {}{}", sig.empty() ? "" : ",\n", in ? "const " : "", ti.dtype == DType::I32 ? "int" : "float",
                       in ? "__restrict__ " : "", pname[t]);
  }
  sig += ",\n    const float* __restrict__ rw_image";
  args.push_back(kCudaImageArg);

  // ---- the stages' code ----
  std::string body, plan;
  auto sm = [](int64_t off) { return fmt::format("sm + {}", off); };
  // a trace stamp (trace only; "" untraced): the interval from the previous stamp ends here, named
  // `name` (code.trace_stages; "start" is put first at the end, so this stamp's index is the names'
  // count + 1); `who` the stamping thread's flag (rw_tracer: thread 0 of the last CTA of cluster 0)
  auto tstamp = [&](const std::string& in, const std::string& name, const std::string& comment, const char* who = "rw_tracer") -> std::string {
    if (!trace) return std::string();
    code.trace_stages.push_back(name);
    return fmt::format("{}if ({}) rw_trace[{}] = clock64();  // trace: {}\n", in, who, code.trace_stages.size() + 1, comment);
  };
  // a pointwise tree's value at column c (row `row`, position t)
  std::function<std::string(int, bool)> expr = [&](int t, bool root) -> std::string {
    if (!root && buf.count(t)) {  // an earlier stage's row
      const TensorInfo& ti = g.tensor(t);
      return ti.cols() == 1 ? fmt::format("sm[{}]", buf.at(t)) : fmt::format("sm[{} + c]", buf.at(t));
    }
    if (small_at.count(t)) return fmt::format("sm[{} + c]", small_at.at(t));
    const int pr = g.tensor(t).producer;
    MINIGPT_CHECK(pr >= 0, "rows: tensor '{}' has no value in the stage", g.tensor(t).name);
    const Node& n = g.nodes[static_cast<size_t>(pr)];
    const int64_t C = g.tensor(n.output).cols();
    auto a = [&](size_t i) { return expr(n.inputs[i], false); };
    switch (n.op) {
      case Op::Embedding:
        return fmt::format("rw_gather({}, {}[row], {}, {}, c)", pname[n.inputs[1]], pname[n.inputs[0]], g.tensor(n.inputs[1]).rows(), C);
      case Op::PosEmbedding: return fmt::format("__ldg({} + (t + {}) * {} + c)", pname[n.inputs[0]], n.offset, C);
      case Op::Add:
      case Op::BiasAdd: return fmt::format("({} + {})", a(0), a(1));
      case Op::Sub: return fmt::format("({} - {})", a(0), a(1));
      case Op::Mul: return fmt::format("({} * {})", a(0), a(1));
      case Op::Div: return fmt::format("({} / {})", a(0), a(1));
      case Op::AddScalar: return fmt::format("({} + {:.9g}f)", a(0), n.alpha);
      case Op::MulScalar: return fmt::format("({} * {:.9g}f)", a(0), n.alpha);
      case Op::Exp: return fmt::format("expf({})", a(0));
      case Op::Rsqrt: return fmt::format("static_cast<float>(1.0 / sqrt(static_cast<double>({})))", a(0));
      case Op::Gelu: return fmt::format("rw_gelu({})", a(0));
      default: MINIGPT_FAIL("rows: no expression for op {}", op_name(n.op));
    }
  };
  auto store_out = [&](int t, const std::string& idx, const std::string& v) {
    std::string s;
    if (buf.count(t)) s += fmt::format("sm[{} + {}] = {}; ", buf.at(t), idx, v);
    if (g.is_graph_output(t)) s += fmt::format("{}[row * {} + {}] = {};", pname[t], g.tensor(t).cols(), idx, v);
    if (!plain && s.ends_with(' ')) s.pop_back();  // (the plain text keeps its trailing space: rows-plain's text is pinned)
    return s;
  };
  // a softmax's end, its own stage's and the fused head's (the same arithmetic): the warp's sum of
  // exp by a butterfly, the warps' sums in warp order, then ev[j] / total stored to tensor t's row
  // (columns tid + j NT, j < J, where < C); `in` the lines' indent (fused: the head's loop unrolled)
  auto softmax_end = [&](const std::string& in, bool fused, int J, int64_t C, int t) {
    std::string r = in + "for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);\n";
    r += fmt::format("{0}if (lane == 0) sm[{1} + warp] = sum;\n{0}__syncthreads();\n{0}float total = sm[{1}];\n{0}for (int w = 1; w < {2}; ++w) total += sm[{1} + w];{3}\n",
                     in, red + NW, NW, fused ? "  // the row's sum of exp, in warp order" : "");
    r += fmt::format("{1}{0}for (int j = 0; j < {2}; ++j) {{\n{0}  const int c = tid + j * {3};\n{0}  if (c < {4}) {{ const float v = ev[j] / total; {5} }}\n{0}}}\n",
                     in, fused ? "#pragma unroll\n" : "", J, NT, C, store_out(t, "c", "v"));
    return r;
  };
  bool small_waited = false;
  auto wait_small = [&](std::string& b) {
    if (small_waited) return;
    small_waited = true;
    b += "  rw_wait(&bars[kBarSmall], 0);  // the small vectors (first use)\n";
  };
  int64_t total_flops = 0, total_wbytes = 0;
  // The ring's pieces issued so far in the program order of the last warp (the start issues the
  // first ns; each matmul stage's refill, after its CTA barrier, the ns after its own), and which
  // matmul stages the last warp's waits before their preceding barrier cover (the default form:
  // "prewait", gpt_mega_rows.cu's kVarPrewait). A stage's pieces can be waited for there only once
  // their copies were issued before that point (else the wait would never end: the last warp itself
  // issues them, later); where not, its threads wait on the mbarriers themselves (rw_piece_at).
  int issued = std::min(ns, pieces);
  std::vector<bool> prewaited(p.stages.size(), false);
  // the CTA barrier closing stage s (every stage's closing barrier is at the stage's top level): in
  // the default form, when stage s + 1 is a matmul whose pieces are in flight, the last warp's
  // lanes first wait for them (the GEMM threads then never wait on an mbarrier)
  // the head (not prewaited: "The head's waits" in the .h): a one-chain-per-output matmul of more outputs than threads (J >= 2), not a qkv,
  // not k-sliced, not deferred
  auto is_head = [&](size_t s) {
    const RowsStage& st = p.stages[s];
    return st.kind == RowsStage::Kind::Matmul && !st.kv && st.slices <= 1 && !defer[s] && st.M > NT;
  };
  auto close = [&](size_t s) {
    std::string r;
    if (!plain && s + 1 < p.stages.size() && rd_e[s + 1] > rd_a[s + 1]) {
      if (headw && is_head(s + 1)) {
        r += fmt::format("  // (stage {}'s pieces not prewaited: its threads wait for their own chains' pieces)\n", s + 1);
      } else if (rd_e[s + 1] <= issued) {
        prewaited[s + 1] = true;
        if (s + 2 < p.stages.size() && defer[s + 2]) prewaited[s + 2] = true;
        r += fmt::format("  rw_prewait<{}, {}>(bars);  // the last warp: stage {}'s weight pieces have landed (before the barrier)\n", rd_a[s + 1],
                         rd_e[s + 1], s + 1);
      }
    }
    return r + "  __syncthreads();\n";
  };
  // a matmul stage's refill after its closing barrier (the default form: slots without a division)
  auto refill = [&](size_t s) {
    const int a = rd_a[s], e = rd_e[s];
    issued = std::max(issued, std::min(e + ns, pieces));
    return plain ? fmt::format("  rw_refill(ring, bars, rw_image, {}, {});\n", a, e)
                 : fmt::format("  rw_refill<{}, {}>(ring, bars, rw_image);  // pieces [{}, {}) read: {}\n", a, e, a, e,
                               a + ns >= pieces ? std::string("nothing left to stream")
                                                : fmt::format("their slots take [{}, {})", a + ns, std::min(e + ns, pieces)));
  };
  // output nidx's weight row of matmul stage si (its piece's slot: waited for by the stage's threads, or
  // by the last warp before the barrier preceding the stage reading it)
  auto piece_ptr = [&](size_t si, const std::string& nidx, const std::string& koff) {
    const RowsStage& st = p.stages[si];
    if (prewaited[si])
      return fmt::format("rw_slot<{}>(ring, {} / {}) + ({} % {}) * {}{}", st.first_piece, nidx, st.rows_per_piece, nidx, st.rows_per_piece,
                         st.ld, koff);
    if (!plain)
      return fmt::format("rw_piece_at<{}>(ring, bars, {} / {}) + ({} % {}) * {}{}", st.first_piece, nidx, st.rows_per_piece, nidx,
                         st.rows_per_piece, st.ld, koff);
    return fmt::format("rw_piece(ring, bars, {} + {} / {}) + ({} % {}) * {}{}", st.first_piece, nidx, st.rows_per_piece, nidx,
                       st.rows_per_piece, st.ld, koff);
  };
  // ---- the deferred matmuls (rows_deferrals; the default text's, none in the plain one) ----
  // Matmul stage sm_s's k-slice j: the same chain as its own stage's lane of slice j (rw_dot over k
  // in [j K/S, (j+1) K/S) from 0, the same FMAs in the same order), stored as partial j of output n
  // at part + j M + n; the LayerNorm stage after it adds them as the matmul's epilogue did.
  // fc2 by slices (kRowsFuseMlpSlices), in the producing one-chain matmul stage after its stores: slice j's input columns are
  // threads [j K/S, (j+1) K/S) (whole warps), which meet at named barrier 1 + j (theirs alone) and
  // then compute slice j's partials, a thread per output.
  auto emit_mlp_partials = [&](size_t si) {
    const RowsStage& mm = p.stages[si];
    const Node& mn = g.nodes[static_cast<size_t>(mm.node)];
    const int S = mm.slices;
    const int64_t kw = mm.K / S, M = mm.M;
    std::string r = fmt::format(
        "  // stage {}'s k-slices here (by the producing warps' slices): slice j's {} inputs are threads [{} j, {} j + {}) (warps {} j..), which meet\n"
        "  // at named barrier 1 + j, then compute slice j's partial of each of the {} outputs (one chain each, as stage {}'s\n"
        "  // lanes of slice j did), stored at sm[{} + j {} + n]\n",
        si, kw, kw, kw, kw, kw / 32, M, si, L.part.at(static_cast<int>(si)), M);
    r += fmt::format("  if (tid < {}) {{\n    const int sl = tid / {}, n = tid % {};\n", mm.K, kw, kw);
    r += fmt::format("    asm volatile(\"bar.sync %0, %1;\" ::\"r\"(1 + sl), \"n\"({}) : \"memory\");  // slice sl's inputs stored\n", kw);
    r += fmt::format("    {}{{\n      float acc[1] = {{0.0f}};\n", M < kw ? fmt::format("if (n < {}) ", M) : std::string());
    r += fmt::format("      rw_dot<{}, 1>({} + sl * {}, {{{}}}, acc);\n", kw, sm(buf.at(mn.inputs[0])), kw, piece_ptr(si, "n", fmt::format(" + sl * {}", kw)));
    r += fmt::format("      sm[{} + sl * {} + n] = acc[0];\n    }}\n  }}\n", L.part.at(static_cast<int>(si)), M);
    return r;
  };
  // proj by heads (kRowsFuseProjHeads), in the attention stage's warp of head hh after its att columns are stored: k-slice
  // hh (its dh columns) of the M outputs, M / 32 per lane (outputs lane + 32 j)
  auto emit_proj_heads = [&](size_t si) {
    const RowsStage& mm = p.stages[si];
    const Node& mn = g.nodes[static_cast<size_t>(mm.node)];
    const int64_t kw = mm.K / mm.slices, M = mm.M;
    const int J = static_cast<int>(M / 32);
    std::string ws;
    for (int j = 0; j < J; ++j) ws += (j ? ", " : "") + piece_ptr(si, j ? fmt::format("(lane + {})", 32 * j) : "lane", fmt::format(" + hh * {}", kw));
    std::string r = fmt::format(
        "    // stage {}'s k-slice hh here (by heads): this head's {} att columns times the {} outputs' weight columns\n"
        "    // [{} hh, {} hh + {}), outputs lane + 32 j (each one chain, as stage {}'s lane of slice hh did), stored at\n"
        "    // sm[{} + hh {} + n]\n",
        si, kw, M, kw, kw, kw, si, L.part.at(static_cast<int>(si)), M);
    r += "    __syncwarp();  // the head's att columns stored\n";
    r += fmt::format("    {{\n      float pacc[{}];\n      rw_dot<{}, {}>({} + hh * {}, {{{}}}, pacc);\n", J, kw, J, sm(buf.at(mn.inputs[0])), kw, ws);
    r += fmt::format("#pragma unroll\n      for (int j = 0; j < {}; ++j) sm[{} + hh * {} + lane + 32 * j] = pacc[j];\n    }}\n", J, L.part.at(static_cast<int>(si)), M);
    return r;
  };
  // the LayerNorm stage after a deferred matmul: its input formed from the partials as the matmul's
  // epilogue did (slice order, + bias, + residual), stored (later stages read it), then the statistics
  auto emit_ln_parts = [&](size_t sl) {
    const RowsStage& mm = p.stages[sl - 1];
    const Node& mn = g.nodes[static_cast<size_t>(mm.node)];
    const Node& n = g.nodes[static_cast<size_t>(p.stages[sl].node)];
    MINIGPT_CHECK(!mn.gelu, "rows: a deferred matmul with a GELU");
    size_t k = 2;
    const int bias = mn.has_bias ? mn.inputs[k++] : -1;
    const int res = mn.has_residual ? mn.inputs[k] : -1;
    // stored where a stage after this one reads it (the LayerNorm itself reads the registers)
    bool mid = false;
    for (size_t r = sl + 1; r < p.stages.size(); ++r)
      mid = mid || std::find(L.reads[r].begin(), L.reads[r].end(), mn.output) != L.reads[r].end();
    MINIGPT_CHECK(!mid || buf.count(mn.output), "rows: a deferred matmul's output read later without a row");
    std::string r = fmt::format("  //   (its input: stage {}'s partials added in slice order{}{}{}: that matmul's epilogue)\n", sl - 1,
                                bias >= 0 ? ", + bias" : "", res >= 0 ? ", + residual" : "", mid ? ", stored" : "");
    r += fmt::format("  if (warp == 0) rw_layernorm_parts<{}, {}, {}, {}, {}>({}, {}, {}, {}, {}, {}, {}, {:.9g}f);\n", mm.M, mm.slices,
                     bias >= 0, res >= 0, mid, sm(L.part.at(static_cast<int>(sl) - 1)), bias >= 0 ? sm(small_at.at(bias)) : "nullptr",
                     res >= 0 ? sm(buf.at(res)) : "nullptr", mid ? sm(buf.at(mn.output)) : "nullptr", sm(buf.at(n.output)),
                     sm(small_at.at(n.inputs[1])), sm(small_at.at(n.inputs[2])), n.alpha);
    return r;
  };
  std::string overlap0;  // the first stage's loop, run by warps 1.. during the start (empty: none)
  // The default text's fused head: matmul stage s (a thread per output, one chain each: no
  // k-slices, not a qkv) whose one reader is stage s + 1, a softmax over its whole output row (the
  // graph's lm_head -> probs), is generated as ONE stage: the logits kept in registers (stored to
  // global as soon as made where they are a graph output), their max and sum of exp over the CTA
  // as the softmax stage computes them, in the same order (bitwise its values), without the
  // logits' round trip through shared memory and the CTA barrier between the stages. (The logits'
  // shared-memory row stays in the layout, rows_layout's, unused: the plain text's layout, the same
  // shared memory; dropping it frees 2.4 KB at V 611, not a ring slot.)
  auto fuses_softmax = [&](size_t s) {
    if (plain || s + 1 >= p.stages.size()) return false;
    const RowsStage &mm = p.stages[s], &sx = p.stages[s + 1];
    if (mm.kind != RowsStage::Kind::Matmul || mm.kv || mm.slices != 1 || sx.kind != RowsStage::Kind::Softmax) return false;
    const int out = g.nodes[static_cast<size_t>(mm.node)].output;
    if (g.nodes[static_cast<size_t>(sx.node)].inputs[0] != out || sx.nodes.size() != 1) return false;
    for (size_t r = 0; r < p.stages.size(); ++r)  // no other stage reads the logits
      if (r != s + 1 && std::find(L.reads[r].begin(), L.reads[r].end(), out) != L.reads[r].end()) return false;
    return true;
  };
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const RowsStage& st = p.stages[s];
    const Node& n = g.nodes[static_cast<size_t>(st.node)];
    const int out = n.output;
    const TensorInfo& to = g.tensor(out);
    std::string srcs, ops;
    std::set<std::string> seen;
    for (int k : st.nodes) {
      const Node& m = g.nodes[static_cast<size_t>(k)];
      ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(m.op));
      const std::string src = m.source.empty() ? std::string(op_name(m.op)) : m.source;
      if (seen.insert(src).second) srcs += (srcs.empty() ? "" : "; ") + src;
    }
    std::string b;
    int64_t flops = 0, wbytes = 0;
    const bool fused_into_previous = s > 0 && fuses_softmax(s - 1);  // a softmax computed by the matmul stage before it
    switch (st.kind) {
      case RowsStage::Kind::Pointwise: {
        flops = static_cast<int64_t>(st.nodes.size()) * to.cols();
        b += fmt::format("  // stage {}: {} -> '{}' (1, {}); {} FLOPs per row; sources: {}\n", s, ops, to.name, to.cols(), flops, srcs);
        const std::string e = expr(out, true);
        bool reads_small = false;
        for (int k : st.nodes)
          for (int t : g.nodes[static_cast<size_t>(k)].inputs) reads_small = reads_small || small_at.count(t) > 0;
        if (s == 0 && !reads_small) {  // the first stage (the embedding): by warps 1.. while warp 0 starts the copies
          b += "  // (computed by warps 1.. during the start, above)\n";
          overlap0 = fmt::format("    for (int c = tid - 32; c < {}; c += {}) {{\n      const float v = {};\n      {}\n    }}\n", to.cols(), NT - 32, e,
                                 store_out(out, "c", "v"));
          break;
        }
        if (reads_small) wait_small(b);
        b += fmt::format("  for (int c = tid; c < {}; c += {}) {{\n    const float v = {};\n    {}\n  }}\n", to.cols(), NT, e, store_out(out, "c", "v"));
        b += close(s);
        break;
      }
      case RowsStage::Kind::LayerNorm: {
        const int64_t C = to.cols();
        flops = 8 * C;
        b += fmt::format("  // stage {}: layernorm (1, {}) -> '{}', eps {:.9g}; ~{} FLOPs per row; source: {}\n", s, C, to.name, n.alpha, flops, srcs);
        if (!plain) b += "  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)\n";
        wait_small(b);
        if (s > 0 && defer[s - 1])
          b += emit_ln_parts(s);
        else
          b += fmt::format("  if (warp == 0) rw_layernorm<{}>({}, {}, {}, {}, {:.9g}f);\n", C, sm(buf.at(n.inputs[0])), sm(buf.at(out)),
                           sm(small_at.at(n.inputs[1])), sm(small_at.at(n.inputs[2])), n.alpha);
        b += close(s);
        if (g.is_graph_output(out)) b += fmt::format("  for (int c = tid; c < {}; c += {}) {}[row * {} + c] = sm[{} + c];\n", C, NT, pname[out], C, buf.at(out));
        break;
      }
      case RowsStage::Kind::Matmul: {
        const int64_t K = st.K, M = st.M;
        flops = 2 * K * M;
        wbytes = K * M * 4;
        const std::string epi = std::string(n.has_bias ? " + b" : "") + (n.gelu ? ", GELU" : "") + (n.has_residual ? ", + residual" : "");
        b += fmt::format("  // stage {}: matmul (1, {}) x ({}, {})^T{}{} -> '{}'; {} FLOPs and {} weight bytes per row (each CTA streams\n"
                         "  //   them: pieces [{}, {}) of {} rows, rows {} floats apart); {}; source: {}\n",
                         s, K, M, K, epi, st.kv ? " -> q kept, k and v pushed to the later CTAs" : "", to.name, flops, wbytes,
                         st.first_piece, st.first_piece + st.pieces, st.rows_per_piece, st.ld,
                         st.slices > 1 ? fmt::format("{} lanes per output, each a k-slice of {}, the slices added in order", st.slices, K / st.slices)
                                       : "a thread per output, one chain over k",
                         srcs);
        size_t k = 2;
        const int bias = n.has_bias ? n.inputs[k++] : -1;
        const int res = n.has_residual ? n.inputs[k] : -1;
        if (bias >= 0) wait_small(b);
        const std::string a = sm(buf.at(n.inputs[0]));
        auto finish = [&](const std::string& idx, const std::string& acc) {
          std::string v = acc;
          if (bias >= 0) v = fmt::format("({} + sm[{} + {}])", v, small_at.at(bias), idx);
          if (n.gelu) v = fmt::format("rw_gelu({})", v);
          if (res >= 0) v = fmt::format("({} + sm[{} + {}])", v, buf.at(res), idx);
          return v;
        };
        auto wptr = [&](const std::string& nidx, const std::string& koff) { return piece_ptr(s, nidx, koff); };
        if (defer[s]) {  // computed by stage s - 1 (its partials) and stage s + 1 (its epilogue)
          b += fmt::format("  //   deferred ({}): its k-slices' partials computed by stage {} into sm [{}, {}) (slice j's at + j {}), its\n"
                           "  //   epilogue (the partials added in slice order{}) by stage {}, the LayerNorm reading it: no stage here\n",
                           defer[s] == kRowsFuseProjHeads ? "by heads" : "by the producing warps' slices", s - 1,
                           L.part.at(static_cast<int>(s)), L.part.at(static_cast<int>(s)) + st.slices * M, M, epi, s + 1);
          break;
        }
        if (prewaited[s]) b += "  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)\n";
        if (st.kv) {
          const int64_t C = M / 3;
          b += fmt::format("  float acc_kv[1];\n  if (tid < {}) rw_dot<{}, 1>({}, {{{}}}, acc_kv);\n", M, K, a, wptr("tid", ""));
          b += fmt::format("  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)\n");
          b += fmt::format("  if (tid < {}) {{\n    const int part = tid / {}, c = tid % {};\n    const float v = {};\n", M, C, C, finish("tid", "acc_kv[0]"));
          b += fmt::format("    if (part == 0) {{\n      sm[{} + c] = v;\n    }} else {{  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async\n", q_at[s]);
          b += fmt::format("      float* dst = sm + (part == 1 ? {} : {}) + t * {} + c;\n      *dst = v;\n", ks, vs, ldk);
          b += "      const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));\n";
          b += "      for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));\n    }\n  }\n";
          b += close(s);
          b += fmt::format("  if (tid == 0) rw_kv_arrive(&bars[kBarKv], static_cast<unsigned>(t * {}) * 4u);  // the earlier rows' k and v\n", 2 * C);
          b += refill(s);
          b += tstamp("  ", fmt::format("stage {}: matmul -> {} (to the k, v wait)", s, to.name), fmt::format("stage {}, before the k, v wait", s));
          b += fmt::format("  rw_kv_wait(&bars[kBarKv], {}u);\n", st.attention & 1);
        } else if (st.slices > 1) {
          const int S = st.slices, D = 32 / S;
          const int64_t ks_ = K / S;
          const int64_t warps = (M * S + 31) / 32;
          b += fmt::format("  if (warp < {}) {{\n    const int n = {} * warp + (lane % {}), s = lane / {};\n    float acc[1] = {{0.0f}};\n", warps, D, D, D);
          b += fmt::format("    if (n < {}) rw_dot<{}, 1>({} + s * {}, {{{}}}, acc);\n", M, ks_, a, ks_, wptr("n", fmt::format(" + s * {}", ks_)));
          std::string sum = "acc[0]";
          for (int j = 1; j < S; ++j) {
            b += fmt::format("    const float p{} = __shfl_down_sync(RW_FULL, acc[0], {});\n", j, j * D);
            sum = fmt::format("({} + p{})", sum, j);
          }
          b += fmt::format("    if (s == 0 && n < {}) {{\n      const float v = {};\n      {}\n    }}\n  }}\n", M, finish("n", sum), store_out(out, "n", "v"));
          b += close(s);
          b += refill(s);
        } else {
          const int J = static_cast<int>((M + NT - 1) / NT);
          // thread tid's columns: tid + j NT for j < J (where < M); chain j's weight row (none: w0's)
          auto wrow = [&](int j) {
            const std::string nj = j ? fmt::format("(tid + {})", j * NT) : "tid";
            return j ? fmt::format("{} < {} ? {} : w0", nj, M, wptr(nj, "")) : std::string("w0");
          };
          auto chains = [&](int c) {
            std::string ws;
            for (int j = 0; j < c; ++j) ws += (j ? ", " : "") + wrow(j);
            return ws;
          };
          // the default text (J >= 2: gpt_mega_rows.cu's kVarLmOne, bitwise): a warp runs as many
          // chains as its FIRST lane has columns (warp w: ceil((M - 32 w) / NT)), so no lane of a warp
          // with fewer columns runs a chain on a copy of its first row; the branches are warp-uniform
          // (a warp whose lanes differ, one at most per chain count, keeps the copy on its last
          // chain). hi[c]: the warps [0, hi[c]) have >= c columns. The plain text: J chains everywhere.
          std::vector<int64_t> hi(static_cast<size_t>(J) + 2, 0);
          for (int c = 1; c <= J; ++c) hi[static_cast<size_t>(c)] = std::min<int64_t>(NW, (M - static_cast<int64_t>(c - 1) * NT + 31) / 32);
          const bool split = !plain && J >= 2 && hi[static_cast<size_t>(J)] < hi[1];
          std::string dots;
          if (!split) {
            dots = fmt::format("    rw_dot<{}, {}>({}, {{{}}}, acc);\n", K, J, a, chains(J));
          } else {
            dots = fmt::format(
                "    // the chains by warp (warp-uniform branches; each chain the same FMAs in the same order as when every\n"
                "    // thread runs all {}): warp w runs one chain per column of its first lane, ceil(({} - 32 w) / {}); a lane\n"
                "    // past the last column in a warp that runs a chain there reads a copy of its first row (not stored)\n",
                J,
                M, NT);
            bool first = true;
            for (int c = J; c >= 1; --c) {
              const int64_t lo = hi[static_cast<size_t>(c) + 1], up = hi[static_cast<size_t>(c)];
              if (up <= lo) continue;
              const std::string what = fmt::format("warps {}..{}: {} chain{}", lo, up - 1, c, c > 1 ? "s" : "");
              // (warps [0, NW) are all there are: a last branch up to NW is a plain else)
              const bool all = c == 1 || (!first && up >= NW);
              dots += fmt::format("    {}{}{{  // {}\n", first ? "" : "} else ", all ? std::string() : fmt::format("if (warp < {}) ", up), what);
              first = false;
              if (c == J && headw) {  // the head: chain by chain, each waiting for its own piece right before it
                for (int j = 0; j < J; ++j)
                  dots += fmt::format("      {{ float a1[1]; rw_dot<{}, 1>({}, {{{}}}, a1); acc[{}] = a1[0]; }}  // chain {}\n", K, a, wrow(j), j, j);
              } else if (c == J) {
                dots += fmt::format("      rw_dot<{}, {}>({}, {{{}}}, acc);\n", K, J, a, chains(J));
              } else {
                std::string rest;
                for (int j = c; j < J; ++j) rest += fmt::format(" acc[{}] = 0.0f;", j);
                dots += fmt::format("      float a{}[{}];\n      rw_dot<{}, {}>({}, {{{}}}, a{});\n", c, c, K, c, a, chains(c), c);
                for (int j = 0; j < c; ++j) dots += fmt::format("      acc[{}] = a{}[{}];\n", j, c, j);
                dots += fmt::format("     {}  // (no such column in this warp: never read)\n", rest);
              }
            }
            dots += "    }\n";
          }
          if (!fuses_softmax(s)) {
            b += fmt::format("  if (tid < {}) {{\n    const float* w0 = {};\n    float acc[{}];\n{}", M, wptr("tid", ""), J, dots);
            for (int j = 0; j < J; ++j) {
              const std::string nj = j ? fmt::format("(tid + {})", j * NT) : "tid";
              b += fmt::format("    {{\n      const int n = {};\n      if (n < {}) {{\n        const float v = {};\n        {}\n      }}\n    }}\n", nj, M,
                               finish("n", fmt::format("acc[{}]", j)), store_out(out, "n", "v"));
            }
            b += "  }\n";
            if (s + 1 < p.stages.size() && defer[s + 1] == kRowsFuseMlpSlices) b += emit_mlp_partials(s + 1);
            b += close(s);
            b += refill(s);
          } else {
            // the softmax of stage s + 1 fused (fuses_softmax): its arithmetic as its own stage's
            // below (the same max, exp, sum and division in the same order), on the registers
            const RowsStage& sx = p.stages[s + 1];
            const int sm_out = g.nodes[static_cast<size_t>(sx.node)].output;
            b += fmt::format(
                "  //   with stage {}'s softmax -> '{}' fused in (its only reader): the logits stay in registers (stored to\n"
                "  //   global at once); the max is exact in any order; exp, sum and division in column order and the warps'\n"
                "  //   values in warp order, as a separate softmax stage does them (the same bits), without the logits' round\n"
                "  //   trip through shared memory and its CTA barrier\n",
                s + 1, g.tensor(sm_out).name);
            b += fmt::format("  float lg[{}];                // this thread's logits: column tid + {} j for j < {} (where < {})\n", J, NT, J, M);
            b += "  float mx = -CUDART_INF_F;   // their max\n";
            b += fmt::format("  if (tid < {}) {{\n    const float* w0 = {};\n    float acc[{}];\n{}", M, wptr("tid", ""), J, dots);
            for (int j = 0; j < J; ++j) {
              const std::string nj = j ? fmt::format("(tid + {})", j * NT) : "tid";
              const std::string st_out = g.is_graph_output(out) ? fmt::format("{}[row * {} + n] = v; ", pname[out], M) : std::string();
              b += fmt::format("    {{\n      const int n = {};\n      if (n < {}) {{\n        const float v = {};\n        {}lg[{}] = v; mx = fmaxf(mx, v);\n      }}\n    }}\n",
                               nj, M, finish("n", fmt::format("acc[{}]", j)), st_out, j);
            }
            b += "  }\n";
            b += "  mx = rw_warp_max(mx);  // the warp's max: one redux.sync (exact)\n";
            b += fmt::format("  if (lane == 0) sm[{} + warp] = mx;\n", red);
            b += "  __syncthreads();  // the warps' maxima written; every chain's reads of the ring done\n";
            b += refill(s);
            b += fmt::format("  mx = sm[{}];\n  for (int w = 1; w < {}; ++w) mx = fmaxf(mx, sm[{} + w]);  // the row's max, in warp order\n", red, NW, red);
            b += fmt::format("  float ev[{}], sum = 0.0f;\n#pragma unroll\n"
                             "  for (int j = 0; j < {}; ++j) {{ ev[j] = tid + j * {} < {} ? expf(lg[j] - mx) : 0.0f; sum += ev[j]; }}\n",
                             J, J, NT, M);
            b += softmax_end("  ", true, J, M, sm_out);
            if (buf.count(sm_out)) b += close(s + 1);
          }
        }
        break;
      }
      case RowsStage::Kind::Attention: {
        const int64_t C = to.cols(), H = n.heads, dh = C / H;
        flops = 4 * dh * H * p.T;  // per row, at most (the last row's T keys)
        b += fmt::format("  // stage {}: causal attention, {} heads of {}, row t over keys 0..t (k, v of the earlier rows from\n"
                         "  //   the earlier CTAs) -> '{}' (1, {}); <= {} FLOPs per row; a warp per head; source: {}\n",
                         s, H, dh, to.name, C, flops, srcs);
        // q: the kv matmul's q row
        int64_t q = -1;
        for (size_t j = 0; j < s; ++j)
          if (p.stages[j].kv && p.stages[j].attention == st.attention) q = q_at[j];
        MINIGPT_CHECK(q >= 0, "rows: attention {} without its qkv stage", st.attention);
        b += fmt::format("  if (warp < {}) {{\n    const int hh = warp, nk = t + 1;\n    const float* qt = sm + {} + hh * {};\n", H, q, dh);
        b += fmt::format("    const int e = hh * {} + (lane % {}) * 4;  // lanes < dh / 4: att's columns e..e+3\n", dh, dh / 4);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
        // the attention's own trace intervals (thread 0: warp 0, head 0, of the last row: the most keys)
        auto astamp = [&](const std::string& what) {
          return tstamp("    ", fmt::format("stage {}: attention: {}", s, what), fmt::format("stage {}, {}", s, what));
        };
        if (!plain) {  // the default text: attention2_text
          b += attention2_text(p.T, dh, ks, vs, ldk, scale, astamp);
        } else {
          b += fmt::format("    const float sc = lane < nk ? rw_dot_qk<{}>(qt, sm + {} + lane * {} + hh * {}) * {:.9g}f : -CUDART_INF_F;\n", dh,
                           ks, ldk, dh, scale);
          b += astamp("q.k scores (warp 0 = head 0)");
          b += "    float m = sc;\n    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(RW_FULL, m, off));\n";
          b += astamp("max (butterfly)");
          b += "    const float ex = lane < nk ? expf(sc - m) : 0.0f;\n    float sum = ex;\n";
          b += "    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);\n";
          b += "    const float pr = ex * (1.0f / sum);\n";
          b += astamp("exp, sum, 1/sum");
          b += "    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);\n";
          b += fmt::format("    for (int k = 0; k < nk; ++k) {{  // att = probabilities times v, in key order\n      const float pk = __shfl_sync(RW_FULL, pr, k);\n"
                           "      if (lane < {}) {{\n        const float4 vv = *reinterpret_cast<const float4*>(sm + {} + k * {} + e);\n"
                           "        acc.x = fmaf(pk, vv.x, acc.x); acc.y = fmaf(pk, vv.y, acc.y); acc.z = fmaf(pk, vv.z, acc.z); acc.w = fmaf(pk, vv.w, acc.w);\n      }}\n    }}\n",
                           dh / 4, vs, ldk);
        }
        b += astamp("probabilities x v");
        b += fmt::format("    if (lane < {}) *reinterpret_cast<float4*>(sm + {} + e) = acc;\n", dh / 4, buf.at(out));
        b += astamp("att stored");
        const bool proj_heads = s + 1 < p.stages.size() && defer[s + 1] == kRowsFuseProjHeads;
        if (proj_heads) b += emit_proj_heads(s + 1);
        b += "  }\n";
        {
          // the closing barrier; traced: the last warp's stamp after its prewait of the next stage's
          // pieces (its own clock64, the same SM's counter: an interval < 0 says it was done before
          // thread 0's store, i.e. not in the barrier's path)
          // (only where this barrier has a prewait: not before a deferred proj, whose pieces the last
          // warp waited for before the attention stage, with the attention's)
          std::string c = close(s);
          if (trace && c.find("rw_prewait<") != std::string::npos) {
            const size_t at = c.rfind("  __syncthreads();\n");
            c.insert(at, tstamp("  ", fmt::format("stage {}: attention: the last warp's prewait of stage {}'s pieces done (< 0: before the store)", s, s + 1),
                                fmt::format("stage {}, the last warp's prewait done", s), "rw_tracer_last"));
          }
          b += c;
        }
        if (st.attention + 1 < p.attentions) b += "  rw_cluster_arrive();  // this CTA's k, v are read: the next layer's may come\n";
        if (proj_heads) b += refill(s);
        if (g.is_graph_output(out)) b += fmt::format("  for (int c = tid; c < {}; c += {}) {}[row * {} + c] = sm[{} + c];\n", C, NT, pname[out], C, buf.at(out));
        break;
      }
      case RowsStage::Kind::Softmax: {
        const int64_t C = to.cols();
        const int J = static_cast<int>((C + NT - 1) / NT);
        flops = 4 * C;
        if (fused_into_previous) {  // computed by the matmul stage before it, on its registers
          b += fmt::format("  // stage {}: softmax over (1, {}) -> '{}'; {} FLOPs per row; source: {}: fused into stage {} above\n", s, C,
                           to.name, flops, srcs, s - 1);
          break;
        }
        b += fmt::format("  // stage {}: softmax over (1, {}) -> '{}': the max and the sum of exp over the CTA (warp butterflies, the\n"
                         "  //   warps' values in warp order), then exp / sum; {} FLOPs per row; source: {}\n",
                         s, C, to.name, flops, srcs);
        const std::string in = sm(buf.at(n.inputs[0]));
        b += fmt::format("  {{\n    const float* in = {};\n    float mx = -CUDART_INF_F, ev[{}], sum = 0.0f;\n", in, J);
        b += fmt::format("    for (int j = 0; j < {}; ++j) if (tid + j * {} < {}) mx = fmaxf(mx, in[tid + j * {}]);\n", J, NT, C, NT);
        b += plain ? "    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(RW_FULL, mx, off));\n"
                   : "    mx = rw_warp_max(mx);  // the warp's max: one redux.sync (exact)\n";
        b += fmt::format("    if (lane == 0) sm[{} + warp] = mx;\n    __syncthreads();\n    mx = sm[{}];\n    for (int w = 1; w < {}; ++w) mx = fmaxf(mx, sm[{} + w]);\n", red, red, NW, red);
        b += fmt::format("    for (int j = 0; j < {}; ++j) {{ ev[j] = tid + j * {} < {} ? expf(in[tid + j * {}] - mx) : 0.0f; sum += ev[j]; }}\n", J, NT, C, NT);
        b += softmax_end("    ", false, J, C, out) + "  }\n";
        if (buf.count(out)) b += close(s);
        break;
      }
    }
    total_flops += flops;
    total_wbytes += wbytes;
    plan += fmt::format("//   stage {:2}: {:<9} {} -> {} {}{}{}\n", s,
                        st.kind == RowsStage::Kind::Matmul      ? "matmul"
                        : st.kind == RowsStage::Kind::LayerNorm ? "layernorm"
                        : st.kind == RowsStage::Kind::Attention ? "attention"
                        : st.kind == RowsStage::Kind::Softmax   ? "softmax"
                                                                : "pointwise",
                        ops, to.name, shape_text({1, to.cols()}),
                        st.kind == RowsStage::Kind::Matmul ? fmt::format(", pieces [{}, {})", st.first_piece, st.first_piece + st.pieces) : "",
                        fused_into_previous ? fmt::format(" (fused into stage {})", s - 1)
                        : defer[s]          ? fmt::format(" (deferred: partials in stage {}, epilogue in stage {})", s - 1, s + 1)
                                            : "");
    body += "  {\n" + b + "  }\n";
    if (trace) {  // (one line per stage: its interval ends here, after the stage's closing barrier)
      // the names say where a stage's work is: stage 0's during the start (warps 1..), a fused
      // softmax's in the matmul stage before it (its own interval: two adjacent stamps)
      std::string name = fmt::format("{} -> {}", ops, to.name);
      if (fuses_softmax(s)) {
        const RowsStage& sx = p.stages[s + 1];
        std::string sx_ops;
        for (int k : sx.nodes) sx_ops += fmt::format(" {}", op_name(g.nodes[static_cast<size_t>(k)].op));
        name = fmt::format("{}{} -> {}, {}", ops, sx_ops, to.name, g.tensor(g.nodes[static_cast<size_t>(sx.node)].output).name);
      } else if (fused_into_previous) {
        name += fmt::format(" (fused into stage {})", s - 1);
      } else if (defer[s]) {
        name += fmt::format(" (deferred: in stages {} and {})", s - 1, s + 1);
      } else if (s == 0 && !overlap0.empty()) {
        name += " (in the start)";
      }
      if (st.kv) name += ": the k, v wait (rw_kv_wait)";
      else if (st.kind == RowsStage::Kind::Attention)  // (with a deferred proj: its k-slice by heads before the barrier)
        name += s + 1 < p.stages.size() && defer[s + 1] == kRowsFuseProjHeads ? fmt::format(" (stage {}'s k-slice by heads, the barrier, the cluster arrive)", s + 1)
                                                                              : std::string(" (the barrier, the cluster arrive)");
      const std::string label = fmt::format("stage {}: {}", s, name);
      code.trace_stages.push_back(label);
      body += fmt::format("  if (rw_tracer) rw_trace[{}] = clock64();  // trace: stage {} ({}) done\n", code.trace_stages.size() + 1, s, name);
    }
  }

  // ---- the kernel ----
  std::string src = fmt::format("// graph {} ({}): the rows form (codegen_cuda_rows.h)\n", g.name, code.graph_hash);
  if (!plain)
    src += "// (its default text, the same values bitwise as the plain text, MINIGPT_CUDA_VARIANT=rows-plain: the\n"
           "// LayerNorm's gain and bias loaded with the row, the attention's max by redux.sync and its key loop\n"
           "// unrolled, rw_dot's k loop unrolled, a matmul's pieces waited for by the last warp before the barrier\n"
           "// preceding it where their copies are in flight there, ring slots without divisions; a matmul of more\n"
           "// than one chain per thread runs its chains by warp, and the softmax reading only the logits is fused\n"
           "// into their matmul stage)\n";
  if (!plain)
    src += "// (its attention stages: the v rows loaded before the scores, the exps gathered once for the sum and the\n"
           "// probabilities, attention2_text)\n";
  if (!plain)
    src += "// (its LayerNorms' 16-lane sums in 2 rounds of gathered lanes, the clamp a select, rsqrt without the\n"
           "// denormal scaling, the gain and bias loaded with the row: kLnGather)\n";
  if (any_defer)
    src += fmt::format("// (deferred matmuls, the same values bitwise:{}{}; the LayerNorm after each forms its input from the partials)\n",
                       std::count(defer.begin(), defer.end(), kRowsFuseProjHeads) ? " a matmul by heads in the attention stage" : "",
                       std::count(defer.begin(), defer.end(), kRowsFuseMlpSlices) ? " a matmul by slices in its producer's stage" : "");
  src += "#define CUDART_INF_F __int_as_float(0x7f800000)\n";
  src += kPreludeBase;
  if (plain) {
    src += rw_text(kPreludeDotText, kDotPlain);
    src += rw_text(kPreludeLnText, kLnPlain);
    src += kPreludeQk;
  } else {
    src += rw_text(kPreludeDotText, kDotDefault);
    src += kPreludeLds1;
    src += rw_text(kPreludeLnText, kLnDefault);
    src += kPreludeMax;  // (no rw_dot_qk: attention2_text writes the scores' FMAs out)
    src += kPreludeLds4;
    if (any_defer) {
      std::string t = rw_text(kPreludeLnText, kLnParts);
      const size_t at = t.find(kLnSignature);
      MINIGPT_CHECK(at != std::string::npos, "rows prelude: rw_layernorm's signature not found");
      t.replace(at, std::string(kLnSignature).size(), kLnPartsSignature);
      src += t;
    }
  }
  src += fmt::format(
      "\n// ---- the ring: pieces of the weight image, in consumption order ----\n"
      "constexpr int kNs = {}, kSlot = {}, kPieces = {}, kBarSmall = {}, kBarKv = {}, kT = {};\n",
      ns, kRowsSlotFloats, pieces, kBarSmall, kBarKv, p.T);
  std::string offs;
  for (size_t i = 0; i < piece_off.size(); ++i) offs += fmt::format("{}{}", i ? ", " : "", piece_off[i]);
  src += fmt::format("// piece i: floats [rw_piece_off[i], rw_piece_off[i + 1]) of the image\n__constant__ int rw_piece_off[{}] = {{{}}};\n",
                     piece_off.size(), offs);
  src += R"(// one thread: piece i's bulk copy into its slot (i % kNs; nothing past the last piece)
__device__ __forceinline__ void rw_issue(float* ring, unsigned long long* bars, const float* img, int i) {
  if (i >= kPieces) return;
  unsigned long long* bar = &bars[i % kNs];
  const unsigned bytes = static_cast<unsigned>(rw_piece_off[i + 1] - rw_piece_off[i]) * 4u;
  rw_expect(bar, bytes);
  rw_bulk(ring + (i % kNs) * kSlot, img + rw_piece_off[i], bytes, bar);
}
)";
  if (plain)  // (the default text has rw_slot and rw_piece_at instead of rw_piece, below)
    src += R"(// piece i's slot, once it has landed (phase (i / kNs) & 1 of the slot's mbarrier)
__device__ __forceinline__ const float* rw_piece(float* ring, unsigned long long* bars, int i) {
  rw_wait(&bars[i % kNs], static_cast<unsigned>((i / kNs) & 1));
  return ring + (i % kNs) * kSlot;
}
// every thread, after the CTA barrier that ends the reads of pieces [a, b): their slots take the
// pieces kNs later, a copy per lane of the last warp
__device__ __forceinline__ void rw_refill(float* ring, unsigned long long* bars, const float* img, int a, int b) {
  const int k = static_cast<int>(threadIdx.x) - )" +
         std::to_string(NT - 32) + R"(;
  if (k >= 0 && k < b - a) rw_issue(ring, bars, img, a + k + kNs);
}
)";
  else
    src += R"(// The stages' pieces [A, B) (B - A <= kNs <= 32): A is a compile-time constant, so slot A % kNs and
// copy number A / kNs are constants and piece A + j's slot takes one compare (j < kNs), no division
// at run time (a division by kNs is a dozen instructions on the GEMM threads' path after every
// barrier).
// Lane j of the last warp, before the CTA barrier preceding the stage that reads pieces [A, B):
// waits for piece A + j to land. An mbarrier wait that returns makes the bulk copy's bytes visible
// to the waiting thread, and the barrier orders them before every other thread's reads after it:
// the stage's threads read their slots at once (rw_slot), none waiting on an mbarrier.
template <int A, int B>
__device__ __forceinline__ void rw_prewait(unsigned long long* bars) {
  const int j = static_cast<int>(threadIdx.x) - )" +
           std::to_string(NT - 32) + R"(;
  if (j >= 0 && j < B - A) {
    const int s = A % kNs + j;                    // < 2 kNs
    const int slot = s >= kNs ? s - kNs : s;
    const int copy = A / kNs + (s >= kNs ? 1 : 0);  // the slot's copy number: its mbarrier's phase
    rw_wait(&bars[slot], static_cast<unsigned>(copy & 1));
  }
}
// piece A + j's slot (j < kNs), after rw_prewait<A, ..> and a CTA barrier
template <int A>
__device__ __forceinline__ const float* rw_slot(float* ring, int j) {
  const int s = A % kNs + j;
  return ring + (s >= kNs ? s - kNs : s) * kSlot;
}
// piece A + j's slot once it has landed, the calling thread waiting (a stage whose pieces' copies
// were not yet all issued at the barrier before it, so the last warp could not wait for them there)
template <int A>
__device__ __forceinline__ const float* rw_piece_at(float* ring, unsigned long long* bars, int j) {
  const int s = A % kNs + j;
  const int slot = s >= kNs ? s - kNs : s;
  rw_wait(&bars[slot], static_cast<unsigned>((A / kNs + (s >= kNs ? 1 : 0)) & 1));
  return ring + slot * kSlot;
}
// every thread, after the CTA barrier that ends the reads of pieces [A, B): their slots take the
// pieces kNs later (piece A + k + kNs into piece A + k's slot), a copy per lane of the last warp
template <int A, int B>
__device__ __forceinline__ void rw_refill(float* ring, unsigned long long* bars, const float* img) {
  const int k = static_cast<int>(threadIdx.x) - )" +
           std::to_string(NT - 32) + R"(;
  const int i = A + kNs + k;
  if (k >= 0 && k < B - A && i < kPieces) {
    const int s = A % kNs + k;
    const int slot = s >= kNs ? s - kNs : s;
    unsigned long long* bar = &bars[slot];
    const unsigned bytes = static_cast<unsigned>(rw_piece_off[i + 1] - rw_piece_off[i]) * 4u;
    rw_expect(bar, bytes);
    rw_bulk(ring + slot * kSlot, img + rw_piece_off[i], bytes, bar);
  }
}
)";
  src += R"(// an embedding row's column c: table[id] (an id outside [0, V): NaN)
__device__ __forceinline__ float rw_gather(const float* __restrict__ table, int id, int V, int C, int c) {
  return id < 0 || id >= V ? __int_as_float(0x7fc00000) : __ldg(table + static_cast<long long>(id) * C + c);
}
)";
  src += fmt::format(
      "\n// ---- cuda_rows_forward: the whole forward as ONE launch of B x T = {} x {} CTAs, a cluster of {} per sequence --------\n"
      "// CTA t of a cluster owns row t of its sequence; every stage is row-local but the attentions' k, v (pushed\n"
      "// to the later CTAs). {} threads per CTA; {} B of dynamic shared memory, in floats: the small vectors [0, {}), the\n"
      "// activation rows [{}, {}) (reused by liveness), k and v of the sequence [{}, {}), the softmax's warp values\n"
      "// [{}, {}), {} mbarriers [{}, {}), the ring of {} slots of {} B [{}, ...). Weight image: {} floats ({} B; the\n"
      "// small vectors {} floats, then {} pieces), each CTA streaming {} B of weights; {} FLOPs per row.\n",
      p.B, p.T, p.T, NT, smem_bytes, small, small, ks, ks, red, red, bars, nbars, bars, ring, ns, kRowsSlotFloats * 4, ring,
      code.image_floats, code.image_floats * 4, small, pieces, total_wbytes, total_flops);
  src += plan;
  if (trace) {
    code.trace_stages.insert(code.trace_stages.begin(), "start");
    src += fmt::format(
        "// ---- the stage trace (CudaCodegenOptions::rows_trace: a measuring aid, never the timed text) ----\n"
        "// rw_trace[0]: clock64() at the kernel's start, [1] after the start's barrier, then one at the end of\n"
        "// every stage (after its closing barrier) and, inside each attention, before the k, v wait and after\n"
        "// each step of head 0 (the last warp's lane 0 after its prewait), in program order: thread 0 of cluster\n"
        "// 0's last CTA (rw_tracer; rw_tracer_last its last warp's lane 0); rw_trace_ns: %globaltimer\n"
        "// at the first and the last stamp (read back by name: cuModuleGetGlobal)\n"
        "__device__ long long rw_trace[{}];\n__device__ unsigned long long rw_trace_ns[2];\n"
        "__device__ __forceinline__ unsigned long long rw_globaltimer() {{\n"
        "  unsigned long long ns;\n  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(ns));\n  return ns;\n}}\n",
        code.trace_stages.size() + 1);
  }
  src += fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1) cuda_rows_forward(\n{}) {{\n", NT, sig);
  src += "  extern __shared__ __align__(16) float sm[];\n";
  src += "  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;\n";
  src += "  const int t = static_cast<int>(rw_rank());  // this CTA's row in its sequence\n";
  src += "  const long long row = blockIdx.x;          // its row of the batch: b T + t\n";
  if (trace)
    src += "  const bool rw_tracer = tid == 0 && blockIdx.x == kT - 1;  // trace: thread 0 of cluster 0's last CTA (the most keys)\n"
           "  const bool rw_tracer_last = tid == " + std::to_string(NT - 32) + " && blockIdx.x == kT - 1;  // trace: its last warp's lane 0\n"
           "  if (rw_tracer) { rw_trace_ns[0] = rw_globaltimer(); rw_trace[0] = clock64(); }  // trace: the kernel's start\n";
  src += fmt::format("  unsigned long long* bars = reinterpret_cast<unsigned long long*>(sm + {});\n  float* ring = sm + {};\n", bars, ring);
  src += fmt::format("  (void)lane; (void)row;\n");
  src += fmt::format(
      "  // start: thread 0 initialises the mbarriers behind one fence and puts the small vectors' copy in\n"
      "  // flight; lanes of warp 0 the ring's first pieces\n"
      "  if (warp == 0) {{\n"
      "    if (lane == 0) {{\n"
      "      for (int i = 0; i < {}; ++i) rw_bar_init(&bars[i]);\n"
      "      rw_fence_bar_init();\n"
      "{}"
      "    }}\n"
      "    __syncwarp();\n"
      "    if (lane < kNs) rw_issue(ring, bars, rw_image, lane);\n"
      "  }}{}\n"
      "  __syncthreads();\n"
      "  rw_cluster_arrive();  // waited on before the first k, v push: this CTA's mbarriers exist\n",
      nbars,
      small > 0 ? fmt::format("      rw_expect(&bars[kBarSmall], {}u);\n      rw_bulk(sm, rw_image, {}u, &bars[kBarSmall]);\n", small * 4, small * 4)
                : std::string(),
      overlap0.empty() ? "" : " else {  // stage 0\n" + overlap0 + "  }");
  if (p.attentions == 0) src += "  rw_cluster_wait();\n";
  if (trace) src += "  if (rw_tracer) rw_trace[1] = clock64();  // trace: the start done\n";
  src += body;
  if (trace) src += "  if (rw_tracer) rw_trace_ns[1] = rw_globaltimer();  // trace: the end\n";
  src += "}\n";
  code.source = src;

  CudaLaunch l;
  l.name = l.function = "cuda_rows_forward";
  l.grid = static_cast<int>(p.N);
  l.block = NT;
  l.smem = static_cast<int>(smem_bytes);
  l.cluster_dim = static_cast<int>(p.T);
  l.args = args;
  code.launches = {l};
  code.kernels = {{l.name, src}};

  // the schedule: one kernel of every node
  sched = Schedule{};
  sched.graph = g;
  Kernel k;
  k.name = l.name;
  k.kind = KernelKind::Rowwise;
  k.group = 0;
  k.rows = p.N;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    k.nodes.push_back(static_cast<int>(i));
    const Node& n = g.nodes[i];
    sched.graph.nodes[i].group = 0;
    if (!g.is_graph_output(n.output)) {
      k.removed.push_back(n.output);
      sched.graph.tensor(n.output).materialized = false;
    }
    const std::string src_op = n.source.empty() ? std::string(op_name(n.op)) : n.source;
    if (std::find(k.sources.begin(), k.sources.end(), src_op) == k.sources.end()) k.sources.push_back(src_op);
  }
  for (int t : args)
    if (t >= 0 && !g.is_graph_output(t)) k.reads.push_back(t);
  k.writes = g.outputs;
  for (int t : k.reads) k.bytes_read += g.tensor(t).bytes();  // (the gathers read rows of their tables only: an upper bound)
  k.bytes_read += code.image_floats * 4;
  for (int t : g.outputs) k.bytes_written += g.tensor(t).bytes();
  k.flops = total_flops * p.N;
  sched.kernels = {k};
  return code;
}

std::vector<float> pack_rows_image(const CudaCode& code, const std::function<const float*(int)>& weight) {
  std::vector<float> img(static_cast<size_t>(code.image_floats), 0.0f);
  for (const CudaImageCopy& c : code.image) {
    const float* w = weight(c.tensor);
    MINIGPT_CHECK(w, "rows: no values for weight tensor %{}", c.tensor);
    // the source's row stride: the copy's rows are whole rows of the tensor (cols = its columns)
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t k = 0; k < c.cols; ++k)
        img[static_cast<size_t>(c.dst + r * c.dst_ld + k)] = w[(c.src_row0 + r) * c.cols + c.src_col0 + k];
  }
  return img;
}

}  // namespace minigpt::compile
