// The megakernel of gpt_mega.h: one cluster of R CTAs, 512 threads each, runs the whole forward.
// Shared memory of every CTA (floats, every region 16-byte aligned; rows padded by 4 floats so
// that 16-byte reads of 8 consecutive rows hit distinct banks):
//   per layer: ln1/ln2 weights and biases (4C), this CTA's head's q, k, v rows of qkv.weight
//   (3dh x C+4) and bias, its proj / fc1 / fc2 rows (as nn.Linear: output columns are weight
//   rows, contiguous in global memory; fc2 by k: all C rows, its F/R columns of each) and
//   biases; the head: ln_f, its lm_head rows and bias;
//   (everything up to here, floats [0, x), is the CTA's part of the weight image: gpt_mega_pack)
//   activations: x, att, ln (N x C+4), h (N x F+4), the GEMMs' slice partials, fc2 by k's
//   partials of this CTA's columns from every CTA (p2), its logits (N x vc),
//   the softmax pairs of every CTA, and one attention item's q, k, v, scores; an mbarrier per
//   weight group; the token ids. Also here: gpt_mega_pack's kernel, and the stage timestamps
//   (diagnostics) the figures in gpt_mega.h come from.
#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gpt_mega.h"
#include "kernels/cuda/warp_softmax.cuh"
#include "kernels/cuda/softmax_cluster.cuh"

#include <math_constants.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

namespace minigpt::cuda {
namespace {

using detail::cluster_arrive;
using detail::cluster_ctarank;
using detail::cluster_wait;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kSlice = 64;  // long sums (k > 64) run as k-slices of 64, added in slice order
// fc2 by k (MegaLayout::fc2k, the forward): k-slices of 16, each CTA's h columns a whole number
// of them, whatever R, so the logits stay the same bitwise at every cluster size
constexpr int kFc2Slice = 16;

__host__ __device__ constexpr int round4(int n) { return (n + 3) / 4 * 4; }
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// Offsets (floats) of every shared-memory region; the same on host and device.
struct MegaLayout {
  int R, N, dh, sC, sF, sd, pc, fc, vc, ns, ns2, kv_rows, kv_layers;
  // fc2 by k (every launch without split_k whose fc is a multiple of kFc2Slice): each CTA
  // multiplies only its own fc columns of h (fc1's outputs: never pushed) by the matching
  // columns of fc2.weight, and pushes each 16-k slice's partial of every output to the CTA that
  // owns the output's column (pc columns each); the owner adds the F/16 partials in slice order,
  // the bias and x, and pushes x as before. Pushed per CTA and layer (shipped model, (2, 16),
  // R = 16): N x C floats of partials instead of N x F of h (8 KB, not 32 KB: the remote stores'
  // bandwidth, ~8 bytes per cycle, was most of the stage). Else fc2 by columns: h (N x F) pushed
  // to every CTA, each computes its pc columns over all of k (kSlice slices).
  bool fc2k;
  // per layer, relative to layer l's base = l * layer
  int ln1w, ln1b, ln2w, ln2b, qkv, qkvb, proj, projb, fc1, fc1b, fc2, fc2b, layer;
  // absolute (head: where the head's regions start)
  int head, lnfw, lnfb, lm, lmb, x, att, ln, h, part, p2, pp, lg, stats, q, kv, sc, bars, ids, total;

  __host__ __device__ MegaLayout(const MegaDims& d, int r) {
    R = r;
    N = d.B * d.T;
    dh = d.C / d.H;
    sC = d.C + 4;
    sF = d.F + 4;
    sd = dh + 4;
    pc = d.C / R;                        // proj and fc2 columns per CTA
    fc = d.F / R;                        // fc1 columns per CTA
    vc = round4(ceil_div(d.V, R));       // lm_head columns per CTA (the last ones may have fewer)
    ns = ceil_div(d.F, kSlice);          // fc2's k-slices (by columns)
    fc2k = !d.split_k && fc % kFc2Slice == 0;
    ns2 = d.F / kFc2Slice;               // fc2's k-slices (by k)
    kv_rows = d.cache ? d.capacity : d.T;  // keys an item sees
    kv_layers = d.cache ? d.L : 1;         // decode: every layer's earlier k, v loaded at the start
    int o = 0;
    auto take = [&o](int n) { const int at = o; o += round4(n); return at; };
    ln1w = take(d.C); ln1b = take(d.C); ln2w = take(d.C); ln2b = take(d.C);
    qkv = take(3 * dh * sC); qkvb = take(3 * dh);
    // proj by columns: this CTA's pc rows of proj.weight; by heads: the C x dh block of its
    // head's input columns (rows padded to dh + 4) and the whole bias
    proj = d.head_proj ? take(d.C * sd) : take(pc * sC);
    projb = d.head_proj ? take(d.C) : take(pc);
    fc1 = take(fc * sC); fc1b = take(fc);
    // fc2 by k: all C rows of fc2.weight, this CTA's fc columns of each (rows padded to fc + 4);
    // by columns: its pc rows, all of k
    fc2 = fc2k ? take(d.C * (fc + 4)) : take(pc * sF); fc2b = take(pc);
    layer = o;
    o = d.L * layer;
    head = o;
    lnfw = take(d.C); lnfb = take(d.C); lm = take(vc * sC); lmb = take(vc);
    x = take(N * sC); att = take(N * sC); ln = take(N * sC); h = take(N * sF);
    part = take(N * max3(pc * ns, fc * ceil_div(d.C, kSlice), pc * ceil_div(d.C, kSlice)));
    p2 = take(fc2k ? ns2 * N * pc : 0);  // fc2 by k: the partials of this CTA's columns (slice, N, pc)
    pp = take(d.head_proj ? d.H * N * sC : 0);  // proj by heads: each head's partial (H, N, C+4)
    lg = take(N * vc);
    stats = take(2 * R * N);
    q = take(d.T * sd);
    kv = take(kv_layers * 2 * kv_rows * sd);
    sc = take(d.T * (kv_rows + 1));
    bars = take(2 * (d.L + 1));  // an mbarrier (8 bytes) per weight group: the layers', the head's
    ids = take(N);               // the token ids (int)
    total = o;
  }
};

// ---- weights: an image of every CTA's shared memory, one bulk copy per group ----
//
// The weight part of a CTA's shared memory (the layers' regions, then the head's: floats
// [0, S.x) of MegaLayout) is built once per plan in global memory by gpt_mega_pack, CTA r's at
// image + r * S.x, padding included. Each launch then brings a group (a layer, or the head) in
// with ONE bulk copy (the copy engine) completing on the group's mbarrier: five instructions of
// one thread for the shipped model, all issued at the start, so the later layers' weights land
// while layer 0 computes. Measured (H200, stage timestamps, shipped model, R = 16): the ~110 KB
// of a CTA's slices issued as 16-byte cp.async from all 512 threads took ~29k cycles (15 us)
// before layer 0 could start (~4 bytes per cycle; the issuing threads stall); as a bulk copy per
// weight row (~80 per layer) ~60k cycles: the copy engine's per-copy cost, ~200 cycles each.

// Waits (every thread) until group g has landed in this CTA's shared memory.
__device__ __forceinline__ void wait_group(uint64_t* bars, int g) { detail::mbarrier_wait(&bars[g], 0); }

// ---- distributed shared memory ----

__device__ __forceinline__ unsigned shared_addr_in(const float* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
}
// v into the slot `local` names in every CTA of the cluster (this one included).
__device__ __forceinline__ void push4(float* local, float4 v, int R) {
  for (int q = 0; q < R; ++q)
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_addr_in(local, q)), "f"(v.x),
                 "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}
__device__ __forceinline__ void push1(float* local, float v, int R) {
  for (int q = 0; q < R; ++q)
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(shared_addr_in(local, q)), "f"(v) : "memory");
}
// v into the slot `local` names in CTA `rank` only (8-byte aligned).
__device__ __forceinline__ void store_remote2(float* local, float2 v, unsigned rank) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(shared_addr_in(local, rank)), "f"(v.x), "f"(v.y)
               : "memory");
}
// v into the slot `local` names in CTA `rank` only (16-byte aligned).
__device__ __forceinline__ void store_remote4(float* local, float4 v, unsigned rank) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_addr_in(local, rank)), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
  cluster_arrive();
  cluster_wait();
}

// ---- diagnostics: stage timestamps (MINIGPT_MEGA_TRACE=1 in the environment selects the
// kernel instance with kTrace; the shipped dims, up to 5 layers). CTA 0's thread 0 records clock64 at every
// stage boundary; launch kTraceEvery / 2 of every kTraceEvery prints them as cycle deltas (e.g.
// `MINIGPT_MEGA_TRACE=1 minigpt bench model --device cuda --no-peers | grep TRACE`). This is how
// the figures in gpt_mega.h were taken; the default kernel compiles the stamps out. ----
constexpr int kTraceSlots = 64;
__host__ __device__ constexpr int trace_slot(int l, int k) { return 3 + 11 * l + k; }  // layer l, point k
constexpr unsigned kTraceEvery = 400;
__device__ long long g_mega_trace[kTraceSlots];
__device__ unsigned g_mega_trace_launches;
template <bool kTrace>
__device__ __forceinline__ void stamp(int r, int slot) {
  if constexpr (kTrace) {
    if (r == 0 && threadIdx.x == 0 && slot < kTraceSlots) g_mega_trace[slot] = clock64();
  }
}
__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- arithmetic ----

// acc[j] += sum over k in [k0, k1) of a[k] * w[j * ldw + k], in k order (4 output columns at
// once: one 16-byte read of a serves four weight rows). k0, k1 multiples of 4.
__device__ __forceinline__ void dot4(const float* a, const float* w, int ldw, int k0, int k1, float (&acc)[4]) {
#pragma unroll 4
  for (int k = k0; k < k1; k += 4) {
    const float4 av = *reinterpret_cast<const float4*>(a + k);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 wv = *reinterpret_cast<const float4*>(w + j * ldw + k);
      acc[j] = fmaf(av.x, wv.x, acc[j]);
      acc[j] = fmaf(av.y, wv.y, acc[j]);
      acc[j] = fmaf(av.z, wv.z, acc[j]);
      acc[j] = fmaf(av.w, wv.w, acc[j]);
    }
  }
}

// The k-split form (MegaDims::split_k) of a stage's sums: W lanes per output group of 4
// columns; lane s adds k in [4s + 4W i, 4s + 4W i + 4) for i = 0, 1, ... in order (a group's W
// lanes read 16 W contiguous bytes of a weight row: no bank conflict), then the W partials are
// added by a butterfly (xor W/2, ..., 1: every lane ends with the same sum, as a + b == b + a).
// W = 8 for k = 64: 8 FMAs per column and 3 shuffles where one thread ran 64 dependent FMAs.
// 0: K does not split (a multiple of 32 needed), use the in-order form.
__host__ __device__ constexpr int split_width(int K) { return K % 128 == 0 ? 32 : (K % 32 == 0 ? 8 : 0); }

template <int W>
__device__ __forceinline__ void dot4_split(const float* a, const float* w, int ldw, int K, int sub, float (&acc)[4]) {
#pragma unroll 2
  for (int k = 4 * sub; k < K; k += 4 * W) dot4(a, w, ldw, k, k + 4, acc);  // this lane's 4 k of the chunk
#pragma unroll
  for (int off = W / 2; off > 0; off >>= 1)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
}

// y (rows x cols/4 groups of 4 columns) = a W^T + b in the k-split form: finish(m, j0, v) with
// v = sum + bias for columns j0..j0+3 of row m, called by the group's lane 0. The loop is uniform
// over each warp (the shuffles need all 32 lanes); a lane past the last unit recomputes it.
template <int W, class Finish>
__device__ __forceinline__ void gemm_split(const float* a, int lda, int rows, int K, const float* w, int ldw,
                                           const float* bias, int cols, Finish finish) {
  const int units = rows * (cols / 4), lane = threadIdx.x & 31, sub = lane % W;
  for (int u0 = static_cast<int>(threadIdx.x >> 5) * (32 / W); u0 < units; u0 += kThreads / W) {
    const int u = u0 + lane / W, uc = u < units ? u : units - 1;
    const int m = uc % rows, j0 = (uc / rows) * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    dot4_split<W>(a + m * lda, w + j0 * ldw, ldw, K, sub, acc);
    if (u < units && sub == 0)
      finish(m, j0, make_float4(acc[0] + bias[j0], acc[1] + bias[j0 + 1], acc[2] + bias[j0 + 2], acc[3] + bias[j0 + 3]));
  }
}
// gemm_split at K's width; false (nothing done) if K does not split.
template <class Finish>
__device__ __forceinline__ bool gemm_split_any(const float* a, int lda, int rows, int K, const float* w, int ldw,
                                               const float* bias, int cols, Finish finish) {
  switch (split_width(K)) {
    case 32: gemm_split<32>(a, lda, rows, K, w, ldw, bias, cols, finish); return true;
    case 8: gemm_split<8>(a, lda, rows, K, w, ldw, bias, cols, finish); return true;
    default: return false;
  }
}

// A score before its scale: q . k over dh (a multiple of 4) in e order, one FMA chain (the
// forward's attention_stage and the decode loop's decode_attention: the same values).
__device__ __forceinline__ float dot_qk(const float* q, const float* k, int dh) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < dh; e += 4) {
    const float4 qv = *reinterpret_cast<const float4*>(q + e);
    const float4 kv = *reinterpret_cast<const float4*>(k + e);
    s = fmaf(qv.x, kv.x, s);
    s = fmaf(qv.y, kv.y, s);
    s = fmaf(qv.z, kv.z, s);
    s = fmaf(qv.w, kv.w, s);
  }
  return s;
}
// One row's att, a warp split over keys: probabilities row[0..n) times v (rows ld apart), lane
// = (key subset ksub, column group eg) of G = dh/4 groups of 4 columns; lane ksub adds keys
// ksub, ksub + 32/G, ... in order and a butterfly over ksub adds the partials: every lane ends
// with its group's 4 columns (32 lanes busy for one row, not dh/4).
__device__ __forceinline__ float4 att_row_split(const float* row, int n, const float* vs, int ld, int G, int lane) {
  const int eg = lane % G, ksub = lane / G;
  float4 a = {0.f, 0.f, 0.f, 0.f};
  for (int p = ksub; p < n; p += 32 / G) {
    const float pr = row[p];
    const float4 vv = *reinterpret_cast<const float4*>(vs + p * ld + eg * 4);
    a.x = fmaf(pr, vv.x, a.x);
    a.y = fmaf(pr, vv.y, a.y);
    a.z = fmaf(pr, vv.z, a.z);
    a.w = fmaf(pr, vv.w, a.w);
  }
#pragma unroll
  for (int off = 16; off >= G; off >>= 1) {
    a.x += __shfl_xor_sync(0xffffffffu, a.x, off);
    a.y += __shfl_xor_sync(0xffffffffu, a.y, off);
    a.z += __shfl_xor_sync(0xffffffffu, a.z, off);
    a.w += __shfl_xor_sync(0xffffffffu, a.w, off);
  }
  return a;
}

// LayerNorm of rows [r0, r1) of `in` into `out` (stride ld), a half-warp per row (two rows per
// warp at once: the 32 rows of a (2, 16) forward's ln2 in one pass of the CTA's 32 half-warps).
// The statistics as layernorm.cuh's warp_row_stats computes them (double, two passes: mean, then
// the mean of squared deviations; rounded to float as the CPU), over 16 lanes instead of 32.
// KC > 0: C == KC, inlined (the loops over a row unrolled); KC == 0: one not-inlined copy for the
// generic kernel's three call sites.
__device__ __forceinline__ double half_warp_sum(double v) {
  for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
template <int KC>
__device__ __forceinline__ void layernorm_rows_t(const float* in, float* out, int r0, int r1, int C_, int ld,
                                                 const float* w, const float* b, float eps) {
  const int C = KC > 0 ? KC : C_;
  const int sub = threadIdx.x & 15;
  // the loop is uniform over a warp (every lane shuffles); a half without a row reads row r0
  for (int pair = r0 + 2 * static_cast<int>(threadIdx.x >> 5); pair < r1; pair += 2 * kWarps) {
    const int r = pair + static_cast<int>((threadIdx.x >> 4) & 1);
    const float* xr = in + (r < r1 ? r : r0) * ld;
    double s = 0.0;
#pragma unroll
    for (int c = sub; c < C; c += 16) s += xr[c];
    const double m = half_warp_sum(s) / static_cast<double>(C);
    double q = 0.0;
#pragma unroll
    for (int c = sub; c < C; c += 16) {
      const double dv = static_cast<double>(xr[c]) - m;
      q += dv * dv;
    }
    const double var = half_warp_sum(q) / static_cast<double>(C);
    const float mean = static_cast<float>(m);
    const float rs = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    if (r < r1) {
#pragma unroll
      for (int c = sub; c < C; c += 16) out[r * ld + c] = (xr[c] - mean) * rs * w[c] + b[c];
    }
  }
}
__device__ __noinline__ void layernorm_rows_generic(const float* in, float* out, int r0, int r1, int C, int ld,
                                                    const float* w, const float* b, float eps) {
  layernorm_rows_t<0>(in, out, r0, r1, C, ld, w, b, eps);
}
template <int KC>
__device__ __forceinline__ void layernorm_rows(const float* in, float* out, int r0, int r1, int C, int ld, const float* w,
                                               const float* b, float eps) {
  if constexpr (KC > 0)
    layernorm_rows_t<KC>(in, out, r0, r1, C, ld, w, b, eps);
  else
    layernorm_rows_generic(in, out, r0, r1, C, ld, w, b, eps);
}

// CTA 0, thread 0: every kTraceEvery launches, the stamps as cycle deltas from entry, and the
// kernel's own wall time (globaltimer).
__device__ __noinline__ void trace_report(int r, long long t_entry_ns, const MegaDims& d, int R) {
  if (r != 0 || threadIdx.x != 0) return;
  const long long t_end = clock64(), ns = global_ns() - t_entry_ns;
  if (atomicAdd(&g_mega_trace_launches, 1u) % kTraceEvery != kTraceEvery / 2) return;
  const long long* t = g_mega_trace;
  printf("TRACE N=%d cache=%d heads=%d R=%d wall=%lld ns cycles=%lld | start %lld %lld %lld\n", d.B * d.T,
         static_cast<int>(d.cache), static_cast<int>(d.head_proj), R, ns, t_end - t[0], t[1] - t[0], t[2] - t[0],
         t[3] - t[0]);
  for (int l = 0; l < d.L; ++l) {
    const long long* u = t + trace_slot(l, 0);
    const long long prev = l == 0 ? t[2] : t[trace_slot(l - 1, 10)];
    printf("TRACE  layer %d: wait %lld ln1 %lld qkv %lld attn %lld push %lld | bar+proj %lld ln2 %lld fc1 %lld "
           "bar %lld fc2 %lld bar %lld\n",
           l, u[0] - prev, u[1] - u[0], u[2] - u[1], u[3] - u[2], u[4] - u[3], u[5] - u[4], u[6] - u[5], u[7] - u[6],
           u[8] - u[7], u[9] - u[8], u[10] - u[9]);
  }
  if (d.cache)  // no probs: the tail is the logits' stores (mapped host memory)
    printf("TRACE  head: wait %lld lnf+lm %lld logits %lld\n", t[60] - t[trace_slot(d.L - 1, 10)],
           t[61] - t[60], t_end - t[61]);
  else
    printf("TRACE  head: wait %lld lnf+lm %lld | probs: stats+push %lld barrier %lld write %lld\n",
           t[60] - t[trace_slot(d.L - 1, 10)], t[61] - t[60], t[62] - t[61], t[63] - t[62], t_end - t[63]);
}

// The model's dims as compile-time constants (the specialised kernel) or 0 (read at run time).
template <int C_, int H_, int F_>
struct Fixed {
  static constexpr int C = C_, H = H_, F = F_;
};

struct Ctx {
  const MegaParams& p;
  MegaDims d;  // by value: the specialised kernel's constants fold, nothing on the stack
  MegaLayout S;
  float* sm;
  int r;     // this CTA's rank
  int pos0;  // position of each sequence's first new row
};

// rows x cols floats, global (row stride lds) -> global (row stride ldd), by the whole block:
// plain loads and stores (the pack runs once per plan; its speed does not matter).
struct PlainCopier {
  __device__ void rows(float* dst, int ldd, const float* src, int64_t lds, int rows, int cols) const {
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x)
      dst[(i / cols) * ldd + i % cols] = src[(i / cols) * lds + i % cols];
  }
  __device__ void vec(float* dst, const float* src, int n) const { rows(dst, 0, src, 0, 1, n); }
};

// Copies CTA r's weight slices of group l (layer l, or l == L: the head) from the model's
// tensors into its image `img` (the shared-memory layout, in global memory), by the whole block.
// Which rows a CTA holds: its head's q, k, v rows (CTAs with attention items), proj's columns
// (or its head's input columns, head_proj), fc1's and fc2's columns, its lm_head rows.
__device__ void pack_group(const MegaParams& p, const MegaLayout& S, int r, int l, float* img) {
  const MegaDims& d = p.dims;
  const int C = d.C, F = d.F, dh = S.dh;
  const PlainCopier cp;
  if (l == d.L) {  // the head's offsets are absolute
    cp.vec(img + S.lnfw, p.ln_f_weight, C);
    cp.vec(img + S.lnfb, p.ln_f_bias, C);
    const int n0 = r * S.vc, vn = max(0, min(S.vc, d.V - n0));
    cp.rows(img + S.lm, S.sC, p.lm_head_weight + static_cast<int64_t>(n0) * C, C, vn, C);
    cp.vec(img + S.lmb, p.lm_head_bias + n0, vn);
    return;
  }
  const MegaLayer& w = p.layers[l];
  float* base = img + l * S.layer;
  cp.vec(base + S.ln1w, w.ln1_weight, C);
  cp.vec(base + S.ln1b, w.ln1_bias, C);
  cp.vec(base + S.ln2w, w.ln2_weight, C);
  cp.vec(base + S.ln2b, w.ln2_bias, C);
  if (r < d.B * d.H) {  // the CTA has attention items, all of head r % H
    const int hh = r % d.H;
    for (int part = 0; part < 3; ++part) {
      cp.rows(base + S.qkv + part * dh * S.sC, S.sC, w.qkv_weight + static_cast<int64_t>(part * C + hh * dh) * C, C,
              dh, C);
      cp.vec(base + S.qkvb + part * dh, w.qkv_bias + part * C + hh * dh, dh);
    }
  }
  if (d.head_proj) {
    if (r < d.B * d.H) cp.rows(base + S.proj, S.sd, w.proj_weight + (r % d.H) * dh, C, C, dh);
    cp.vec(base + S.projb, w.proj_bias, C);
  } else {
    cp.rows(base + S.proj, S.sC, w.proj_weight + static_cast<int64_t>(r * S.pc) * C, C, S.pc, C);
    cp.vec(base + S.projb, w.proj_bias + r * S.pc, S.pc);
  }
  cp.rows(base + S.fc1, S.sC, w.fc1_weight + static_cast<int64_t>(r * S.fc) * C, C, S.fc, C);
  cp.vec(base + S.fc1b, w.fc1_bias + r * S.fc, S.fc);
  if (S.fc2k)
    cp.rows(base + S.fc2, S.fc + 4, w.fc2_weight + r * S.fc, F, C, S.fc);
  else
    cp.rows(base + S.fc2, S.sF, w.fc2_weight + static_cast<int64_t>(r * S.pc) * F, F, S.pc, F);
  cp.vec(base + S.fc2b, w.fc2_bias + r * S.pc, S.pc);
}

// Block r: CTA r's image (the buffer is zeroed first: the padding is defined).
__global__ void gpt_mega_pack_kernel(const __grid_constant__ MegaParams p, int R, float* image) {
  const MegaLayout S(p.dims, R);
  const int r = static_cast<int>(blockIdx.x);
  for (int l = 0; l <= p.dims.L; ++l) pack_group(p, S, r, l, image + static_cast<int64_t>(r) * S.x);
}

// Group g of this CTA's image: where it starts in shared memory (= in the image) and its floats.
__device__ __forceinline__ int group_offset(const MegaLayout& S, int L, int g) { return g < L ? g * S.layer : S.head; }
__device__ __forceinline__ int group_floats(const MegaLayout& S, int L, int g) {
  return g < L ? S.layer : S.x - S.head;
}
// One thread: every group's bulk copy from this CTA's image `img` put in flight, layer 0's
// first and the head's last, each completing on its mbarrier bars[g] (wait_group).
__device__ __forceinline__ void issue_weight_copies(float* sm, uint64_t* bars, const MegaLayout& S, int L, const float* img) {
  for (int g = 0; g <= L; ++g) {
    const int off = group_offset(S, L, g);
    const unsigned bytes = static_cast<unsigned>(group_floats(S, L, g)) * sizeof(float);
    detail::mbarrier_init(&bars[g]);
    detail::mbarrier_arrive_expect_tx(&bars[g], bytes);
    detail::bulk_load(sm + off, img + off, bytes, &bars[g]);
  }
}

// Stage A of layer l: every (sequence b, head hh) item of this CTA (items r, r + R, ...; all of
// head r % H): ln1 of b's rows, the head's q, k, v, causal attention; att pushed to every CTA,
// or (head_proj) kept here and its part of proj, att_h proj.weight[:, head's columns]^T for every
// output column, pushed to every CTA's pp[hh] instead. The attention proper runs a warp per query
// row: its scores (a lane per key), their softmax and its att columns, with no CTA barrier
// between them (the row's values are the warp's own; T = 16: all 16 warps busy).
template <class K, bool kSplit, bool kTrace>
__device__ __forceinline__ void attention_stage(const Ctx& c, int l) {
  const MegaDims& d = c.d;
  const MegaLayout& S = c.S;
  const int T = d.T, C = d.C, dh = S.dh, tid = threadIdx.x, R = S.R, pos0 = c.pos0;
  const int warp = tid >> 5, lane = tid & 31;
  const float* base = c.sm + l * S.layer;
  const MegaLayer& w = c.p.layers[l];
  float *x = c.sm + S.x, *ln = c.sm + S.ln, *att = c.sm + S.att, *qs = c.sm + S.q, *sc = c.sm + S.sc;
  float* ks = c.sm + S.kv + (d.cache ? l : 0) * 2 * S.kv_rows * S.sd;
  float* vs = ks + S.kv_rows * S.sd;
  const int ldsc = S.kv_rows + 1, groups = 3 * dh / 4;
  const float scale = 1.0f / sqrtf(static_cast<float>(dh));
  for (int item = c.r; item < d.B * d.H; item += R) {
    const int b = item / d.H, hh = item % d.H, row0 = b * T;
    layernorm_rows<K::C>(x, ln, row0, row0 + T, C, S.sC, base + S.ln1w, base + S.ln1b, c.p.eps);
    __syncthreads();
    stamp<kTrace>(c.r, trace_slot(l, 1));
    // q, k, v of the new rows: (t, 4 columns of the head's 3dh) per thread, t fastest over the
    // lanes (see gemm_stage); sum in k order (or split over lanes, split_k) + bias
    auto store_qkv = [&](int t, int j0, float4 v) {
      const int part = j0 / dh, d0 = j0 % dh;
      if (part == 0) {
        *reinterpret_cast<float4*>(qs + t * S.sd + d0) = v;
      } else {
        float* dst = part == 1 ? ks : vs;
        *reinterpret_cast<float4*>(dst + (pos0 + t) * S.sd + d0) = v;
        if (d.cache) {  // for the later steps
          float* cache = part == 1 ? w.k_cache : w.v_cache;
          *reinterpret_cast<float4*>(cache + (static_cast<int64_t>(b) * d.capacity + pos0 + t) * C + hh * dh + d0) = v;
        }
      }
    };
    if (!(kSplit && gemm_split_any(ln + row0 * S.sC, S.sC, T, C, base + S.qkv, S.sC, base + S.qkvb, 3 * dh, store_qkv))) {
      for (int u = tid; u < T * groups; u += kThreads) {
        const int t = u % T, j0 = (u / T) * 4;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        dot4(ln + (row0 + t) * S.sC, base + S.qkv + j0 * S.sC, S.sC, 0, C, acc);
        store_qkv(t, j0, make_float4(acc[0] + base[S.qkvb + j0], acc[1] + base[S.qkvb + j0 + 1],
                                     acc[2] + base[S.qkvb + j0 + 2], acc[3] + base[S.qkvb + j0 + 3]));
      }
    }
    __syncthreads();
    stamp<kTrace>(c.r, trace_slot(l, 2));
    if (l == 0 && item == c.r) cluster_wait();  // every CTA has started: its shared memory exists
    for (int t = warp; t < T; t += kWarps) {
      const int n = pos0 + t + 1;  // keys p <= pos0 + t (the rest is masked: never computed)
      float* row = sc + t * ldsc;
      const float* qt = qs + t * S.sd;
      for (int p = lane; p < n; p += 32) row[p] = dot_qk(qt, ks + p * S.sd, dh) * scale;  // key p's score
      __syncwarp();
      warp_softmax_inplace(row, n);
      __syncwarp();
      // att (t, 4 of the head's columns) = probabilities times v, in key order; to every CTA
      auto store_att = [&](int e, float4 a) {
        if (d.head_proj)
          *reinterpret_cast<float4*>(att + (row0 + t) * S.sC + hh * dh + e) = a;
        else
          push4(att + (row0 + t) * S.sC + hh * dh + e, a, R);
      };
      if (kSplit && 32 % (dh / 4) == 0) {
        // split_k: the keys over the lanes too (att_row_split: a decode step's one row keeps 32
        // lanes busy, not dh/4)
        const int G = dh / 4;
        const float4 a = att_row_split(row, n, vs, S.sd, G, lane);
        if (lane / G == 0) store_att((lane % G) * 4, a);
        continue;
      }
      for (int e = lane * 4; e < dh; e += 128) {
        float4 a = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
        for (int p = 0; p < n; ++p) {
          const float pr = row[p];
          const float4 vv = *reinterpret_cast<const float4*>(vs + p * S.sd + e);
          a.x = fmaf(pr, vv.x, a.x);
          a.y = fmaf(pr, vv.y, a.y);
          a.z = fmaf(pr, vv.z, a.z);
          a.w = fmaf(pr, vv.w, a.w);
        }
        store_att(e, a);
      }
    }
    stamp<kTrace>(c.r, trace_slot(l, 3));
    if (d.head_proj) {
      __syncthreads();
      float* pp = c.sm + S.pp;
      for (int u = tid; u < T * (C / 4); u += kThreads) {  // (t, 4 output columns), k in order
        const int t = u % T, n0 = (u / T) * 4;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        dot4(att + (row0 + t) * S.sC + hh * dh, base + S.proj + n0 * S.sd, S.sd, 0, dh, acc);
        push4(pp + (hh * S.N + row0 + t) * S.sC + n0, make_float4(acc[0], acc[1], acc[2], acc[3]), R);
      }
    }
    __syncthreads();  // q, k, v, scores are reused by the next item
  }
  if (l == 0 && c.r >= d.B * d.H) cluster_wait();  // a CTA without items pairs the start's arrive here
}

// y (N x 4-column groups of this CTA's `cols` columns starting at n0) = a W^T + b with the sums
// in k-slices of kSlice added in order; finish(m, n, v) gets (sum + bias) for 4 columns.
// The row m runs fastest over a warp's lanes: at each k the lanes read up to 32 rows of a (row
// stride C+4 or F+4: 8 consecutive rows in distinct banks) and ONE address of w (a broadcast).
// With the columns fastest (the version before), the lanes read weight rows 4 apart, which fall
// in 2 of the 8 bank groups: the q, k, v stage took ~25 shared-memory wavefronts per k-step of 4
// where this takes 6 (stage timestamps: the forward's q, k, v stage was ~6.7k cycles).
template <bool kSplit, class Finish>
__device__ __forceinline__ void gemm_stage(const Ctx& c, const float* a, int lda, int K, const float* w, int ldw, const float* bias,
                           int cols, Finish finish) {
  const int N = c.S.N, groups = cols / 4, ns = ceil_div(K, kSlice), tid = threadIdx.x;
  float* part = c.sm + c.S.part;
  if (kSplit && gemm_split_any(a, lda, N, K, w, ldw, bias, cols, finish)) return;
  if (ns == 1) {
    for (int u = tid; u < N * groups; u += kThreads) {
      const int m = u % N, j0 = (u / N) * 4;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      dot4(a + m * lda, w + j0 * ldw, ldw, 0, K, acc);
      finish(m, j0, make_float4(acc[0] + bias[j0], acc[1] + bias[j0 + 1], acc[2] + bias[j0 + 2], acc[3] + bias[j0 + 3]));
    }
    return;
  }
  for (int u = tid; u < N * groups * ns; u += kThreads) {
    // u = (slice s, 4 columns jg) x N + m; its partial at part[(g, s)] with g = m * groups + jg
    const int m = u % N, s = (u / N) % ns, jg = u / N / ns, g = m * groups + jg, j0 = jg * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    dot4(a + m * lda, w + j0 * ldw, ldw, s * kSlice, min(K, (s + 1) * kSlice), acc);
    *reinterpret_cast<float4*>(part + (g * ns + s) * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  __syncthreads();
  for (int g = tid; g < N * groups; g += kThreads) {
    const int m = g / groups, j0 = (g % groups) * 4;
    float4 v = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < ns; ++s) {
      const float4 pv = *reinterpret_cast<const float4*>(part + (g * ns + s) * 4);
      v.x += pv.x;
      v.y += pv.y;
      v.z += pv.z;
      v.w += pv.w;
    }
    finish(m, j0, make_float4(v.x + bias[j0], v.y + bias[j0 + 1], v.z + bias[j0 + 2], v.w + bias[j0 + 3]));
  }
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// The residual x (N x C+4) += y for this CTA's columns, pushed to every CTA.
template <bool kSplit>
__device__ __forceinline__ void residual_stage(const Ctx& c, const float* a, int lda, int K, const float* w, int ldw, const float* bias) {
  float* x = c.sm + c.S.x;
  const int n0 = c.r * c.S.pc, R = c.S.R, sC = c.S.sC;
  gemm_stage<kSplit>(c, a, lda, K, w, ldw, bias, c.S.pc, [&](int m, int j0, float4 v) {
    float* slot = x + m * sC + n0 + j0;
    push4(slot, add4(v, *reinterpret_cast<const float4*>(slot)), R);  // (sum + b) + x, as the CPU
  });
}

// fc2 by k (MegaLayout::fc2k), first half: for each 16-k slice of this CTA's columns of h
// (f0 = r fc, written here by fc1) and each output (row m, 4 columns n0..n0+3), the slice's sum
// in k order from 0, pushed to the CTA owning those columns (n0 / pc) at p2[(slice, m, n0 % pc)].
// Rows run fastest over the lanes (one fc2.weight address per warp: a broadcast), as gemm_stage.
__device__ __forceinline__ void fc2_partials(const Ctx& c, const float* h, const float* w) {
  const MegaLayout& S = c.S;
  const int N = S.N, g = c.d.C / 4, sl = S.fc / kFc2Slice, f0 = c.r * S.fc, ldw = S.fc + 4;
  float* p2 = c.sm + S.p2;
  for (int s = 0; s < sl; ++s) {
    float* dst = p2 + (f0 / kFc2Slice + s) * N * S.pc;
    for (int u = threadIdx.x; u < N * g; u += kThreads) {
      const int m = u % N, n0 = (u / N) * 4;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      dot4(h + m * S.sF + f0, w + n0 * ldw, ldw, s * kFc2Slice, (s + 1) * kFc2Slice, acc);
      store_remote4(dst + m * S.pc + n0 % S.pc, make_float4(acc[0], acc[1], acc[2], acc[3]),
                    static_cast<unsigned>(n0 / S.pc));
    }
  }
}
// Second half, after a cluster barrier: this CTA's pc columns of x += (the F/16 partials added in
// slice order) + b, pushed to every CTA: (sum + b) + x, as residual_stage.
__device__ __forceinline__ void fc2_finish(const Ctx& c, const float* bias) {
  const MegaLayout& S = c.S;
  const int N = S.N, pc = S.pc, n0 = c.r * pc;
  const float* p2 = c.sm + S.p2;
  float* x = c.sm + S.x;
  for (int u = threadIdx.x; u < N * (pc / 4); u += kThreads) {
    const int m = u % N, j0 = (u / N) * 4;
    float4 v = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < S.ns2; ++s) v = add4(v, *reinterpret_cast<const float4*>(p2 + (s * N + m) * pc + j0));
    float* slot = x + m * S.sC + n0 + j0;
    const float4 y = make_float4(v.x + bias[j0], v.y + bias[j0 + 1], v.z + bias[j0 + 2], v.w + bias[j0 + 3]);
    push4(slot, add4(y, *reinterpret_cast<const float4*>(slot)), S.R);
  }
}

// dims with K's compile-time constants in place (they then fold into every offset and index).
template <class K>
__device__ __forceinline__ MegaDims fixed_dims(MegaDims d) {
  d.C = K::C > 0 ? K::C : d.C;
  d.H = K::H > 0 ? K::H : d.H;
  d.F = K::F > 0 ? K::F : d.F;
  return d;
}

// K: the model's C, H, F as compile-time constants (gpt_mega_kernel<Fixed<64, 4, 256>>, the
// shipped architecture: the layout's offsets and every index fold to constants, no run-time
// divisions by them) or Fixed<0, 0, 0>, the generic kernel reading them from p.dims. kSplit: the
// k-split sums (p.dims.split_k, the decode step) in their own instance: as a run-time branch in
// the one kernel they made the forward's code spill (ptxas: 32 bytes, at the 128 registers of
// 512 threads per CTA; none before or as a separate instance), and the forward measured ~1.3 us
// slower (H200, 63.0 -> 64.4 us).
template <class K, bool kSplit, bool kTrace = false>
__global__ void __launch_bounds__(kThreads, 1) gpt_mega_kernel(const __grid_constant__ MegaParams p, int R) {
  extern __shared__ __align__(16) float sm[];
  const MegaDims d = fixed_dims<K>(p.dims);
  const MegaLayout S(d, R);
  const int r = static_cast<int>(cluster_ctarank()), tid = threadIdx.x, C = d.C, N = S.N;
  Ctx c{p, d, S, sm, r, 0};
  long long t_entry_ns = 0;
  if constexpr (kTrace) t_entry_ns = global_ns();
  stamp<kTrace>(r, 0);

  // 1. the position first (decode: mapped host memory, a PCIe round trip that the copies below
  //    overlap); then an mbarrier and a bulk copy per weight group
  const int pos0 = p.pos ? *p.pos : p.position;  // by value (parameter space): no round trip
  c.pos0 = pos0;
  int* ids = reinterpret_cast<int*>(sm + S.ids);  // read with the position: one round trip for both
  for (int m = tid; m < N; m += kThreads) ids[m] = p.ids ? p.ids[m] : p.id;
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + S.bars);
  if (tid == 0) issue_weight_copies(sm, bars, S, d.L, p.image + static_cast<int64_t>(r) * S.x);
  __syncthreads();  // the barriers are initialised before anyone waits on them; ids are in

  // 2. out of range: NaN outputs, and leave before any cluster barrier (once the copies have landed)
  if (pos0 < 0 || pos0 + d.T > d.capacity || pos0 + d.T > d.P) {
    const int n0 = r * S.vc, vn = max(0, min(S.vc, d.V - n0));
    for (int i = tid; i < N * vn; i += kThreads) {
      const int64_t at = static_cast<int64_t>(i / vn) * d.V + n0 + i % vn;
      p.logits[at] = CUDART_NAN_F;
      if (p.probs) p.probs[at] = CUDART_NAN_F;
    }
    for (int g = 0; g <= d.L; ++g) wait_group(bars, g);
    return;
  }
  cluster_arrive();  // waited on before the first push (attention_stage of layer 0)
  stamp<kTrace>(r, 1);

  // 3. the embedding of all N rows (a replica per CTA), and (decode) the earlier k, v rows of
  //    this CTA's head for every layer: loads first, then the stores (one round trip)
  float* x = sm + S.x;
  for (int i0 = 0; i0 < N * C; i0 += 16 * kThreads) {
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = i0 + (j * kThreads + tid) * 4;
      v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < N * C) {
        const int m = i / C, e = i % C, id = ids[m], ps = pos0 + m % d.T;
        if (id < 0 || id >= d.V) {
          v[j] = make_float4(CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F);
        } else {
          const float4 te = __ldg(reinterpret_cast<const float4*>(p.wte + static_cast<int64_t>(id) * C + e));
          const float4 pe = __ldg(reinterpret_cast<const float4*>(p.wpe + static_cast<int64_t>(ps) * C + e));
          v[j] = add4(te, pe);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = i0 + (j * kThreads + tid) * 4;
      if (i < N * C) *reinterpret_cast<float4*>(x + (i / C) * S.sC + i % C) = v[j];
    }
  }
  if (d.cache && r < d.B * d.H) {  // one item: sequence r / H, head r % H
    const int b = r / d.H, hh = r % d.H, dh = S.dh, q = dh / 4;
    const int n = d.L * 2 * pos0 * q;  // float4s: (layer, k|v, position, quarter)
    for (int i0 = 0; i0 < n; i0 += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = i0 + j * kThreads + tid;
        if (i < n) {
          const int e = (i % q) * 4, ps = (i / q) % pos0, kv = (i / q / pos0) % 2, l = i / q / pos0 / 2;
          const float* cache = kv == 0 ? p.layers[l].k_cache : p.layers[l].v_cache;
          v[j] = *reinterpret_cast<const float4*>(cache + (static_cast<int64_t>(b) * d.capacity + ps) * C + hh * dh + e);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = i0 + j * kThreads + tid;
        if (i < n) {
          const int e = (i % q) * 4, ps = (i / q) % pos0, kv = (i / q / pos0) % 2, l = i / q / pos0 / 2;
          float* dst = sm + S.kv + (l * 2 + kv) * S.kv_rows * S.sd;
          *reinterpret_cast<float4*>(dst + ps * S.sd + e) = v[j];
        }
      }
    }
  }
  stamp<kTrace>(r, 2);

  for (int l = 0; l < d.L; ++l) {
    wait_group(bars, l);
    __syncthreads();
    stamp<kTrace>(r, trace_slot(l, 0));
    const float* base = sm + l * S.layer;
    attention_stage<K, kSplit, kTrace>(c, l);
    stamp<kTrace>(r, trace_slot(l, 4));
    cluster_sync_all();
    if (d.head_proj) {  // x += (the heads' partials, summed in head order) + b, every CTA all of it
      const float* pp = sm + S.pp;
      for (int i = tid; i < N * C; i += kThreads) {
        const int m = i / C, n = i % C;
        float v = 0.0f;
        for (int hh = 0; hh < d.H; ++hh) v += pp[(hh * N + m) * S.sC + n];
        x[m * S.sC + n] = (v + base[S.projb + n]) + x[m * S.sC + n];
      }
      __syncthreads();
    } else {
      residual_stage<kSplit>(c, sm + S.att, S.sC, C, base + S.proj, S.sC, base + S.projb);
      cluster_sync_all();
    }
    stamp<kTrace>(r, trace_slot(l, 5));
    float* ln = sm + S.ln;
    float* h = sm + S.h;
    layernorm_rows<K::C>(x, ln, 0, N, C, S.sC, base + S.ln2w, base + S.ln2b, p.eps);
    __syncthreads();
    stamp<kTrace>(r, trace_slot(l, 6));
    const int f0 = r * S.fc;
    // fc2 by k: h stays here (see MegaLayout). Known at compile time for the shipped F (F / R a
    // multiple of 16 for every R <= 16): one fc2 path in the code, no register spill (with both
    // as a run-time branch ptxas spilled 32 bytes)
    constexpr bool kFc2kAlways = K::F > 0 && K::F % (16 * kFc2Slice) == 0;
    const bool fc2k = !kSplit && (kFc2kAlways || S.fc2k);
    gemm_stage<kSplit>(c, ln, S.sC, C, base + S.fc1, S.sC, base + S.fc1b, S.fc, [&](int m, int j0, float4 v) {
      const float4 g = make_float4(gelu_erf(v.x), gelu_erf(v.y), gelu_erf(v.z), gelu_erf(v.w));
      if (fc2k)
        *reinterpret_cast<float4*>(h + m * S.sF + f0 + j0) = g;
      else
        push4(h + m * S.sF + f0 + j0, g, R);
    });
    if (fc2k) {
      __syncthreads();
      fc2_partials(c, h, base + S.fc2);
    }
    stamp<kTrace>(r, trace_slot(l, 7));  // the trace's "fc1": with fc2 by k, fc1 + the partials
    cluster_sync_all();
    stamp<kTrace>(r, trace_slot(l, 8));
    if (fc2k)
      fc2_finish(c, base + S.fc2b);
    else
      residual_stage<kSplit>(c, h, S.sF, d.F, base + S.fc2, S.sF, base + S.fc2b);
    stamp<kTrace>(r, trace_slot(l, 9));
    cluster_sync_all();
    stamp<kTrace>(r, trace_slot(l, 10));
  }

  // head: ln_f, this CTA's vocabulary columns
  wait_group(bars, d.L);
  __syncthreads();
  stamp<kTrace>(r, 60);
  const float* hd = sm;  // the head's offsets are absolute
  float* ln = sm + S.ln;
  float* lg = sm + S.lg;
  layernorm_rows<K::C>(x, ln, 0, N, C, S.sC, hd + S.lnfw, hd + S.lnfb, p.eps);
  __syncthreads();
  const int n0 = r * S.vc, vn = max(0, min(S.vc, d.V - n0)), groups = ceil_div(vn, 4);
  // logits into shared memory only: the global (or mapped host) stores come after the softmax's
  // cluster barrier, coalesced (a row's columns over the lanes; here the lanes run over rows, a
  // line each), and out of that barrier's release (which waits for the stores before it)
  auto store_logits = [&](int m, int j0, float4 v) {  // columns past vn (padding): never stored
    const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j0 + j < vn) lg[m * S.vc + j0 + j] = vv[j];
  };
  if (!(kSplit && gemm_split_any(ln, S.sC, N, C, hd + S.lm, S.sC, hd + S.lmb, groups * 4, store_logits))) {
    for (int u = tid; u < N * groups; u += kThreads) {
      const int m = u % N, j0 = (u / N) * 4;  // rows fastest, as gemm_stage
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      dot4(ln + m * S.sC, hd + S.lm + j0 * S.sC, S.sC, 0, C, acc);
      store_logits(m, j0, make_float4(acc[0] + hd[S.lmb + j0], acc[1] + hd[S.lmb + j0 + 1], acc[2] + hd[S.lmb + j0 + 2],
                                      acc[3] + hd[S.lmb + j0 + 3]));
    }
  }
  __syncthreads();
  stamp<kTrace>(r, 61);
  if (!p.probs) {
    for (int i = tid; i < N * vn; i += kThreads) {  // (row, column), columns fastest
      const int m = i / vn, j = i % vn;
      p.logits[static_cast<int64_t>(m) * d.V + n0 + j] = lg[m * S.vc + j];
    }
    if constexpr (kTrace) trace_report(r, t_entry_ns, p.dims, R);
    return;  // no cluster access after the last barrier: a CTA may leave
  }
  // softmax over the whole row, a half-warp per row (rows r0 + 2 warp + half, the 32 rows of a
  // (2, 16) forward in one pass of the CTA's 32 half-warps; the loop is uniform over a warp for
  // the shuffles: a half without a row works on row 0 and discards it). Stats: each lane's max
  // and sum of exp over columns sub, sub + 16, ... in order, combined by a 16-lane butterfly
  // (every lane ends with the same value: a + b == b + a); lane q pushes the pair to CTA q (one
  // remote store per lane, all at once). After the barrier lane q reads CTA q's pair: M by a
  // max butterfly (exact), the total of s_q exp(m_q - M) by a sum butterfly: a fixed order for
  // a given R (the pairs of CTAs past R are (-inf, 0): a term of +0). A NaN logit makes its
  // sum, so the row, NaN (fmaxf skips it, the exp does not).
  float* stats = sm + S.stats;
  const int sub = tid & 15;
  for (int pair = 2 * (tid >> 5); pair < N; pair += 2 * kWarps) {
    const int m = pair + ((tid >> 4) & 1), mr = m < N ? m : 0;
    const float* row = lg + mr * S.vc;
    float mx = -CUDART_INF_F;
    for (int j = sub; j < vn; j += 16) mx = fmaxf(mx, row[j]);
    for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
    for (int j = sub; j < vn; j += 16) sum += expf(row[j] - mx);
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (m < N && sub < R) store_remote2(stats + (r * N + m) * 2, make_float2(mx, sum), sub);
  }
  stamp<kTrace>(r, 62);
  cluster_sync_all();
  stamp<kTrace>(r, 63);
  for (int pair = 2 * (tid >> 5); pair < N; pair += 2 * kWarps) {
    const int m = pair + ((tid >> 4) & 1), mr = m < N ? m : 0;
    const float2 st = sub < R ? *reinterpret_cast<const float2*>(stats + (sub * N + mr) * 2)
                              : make_float2(-CUDART_INF_F, 0.0f);
    float M = st.x;
    for (int off = 8; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float total = st.x == -CUDART_INF_F ? 0.0f * st.y : st.y * expf(st.x - M);  // a CTA without columns: 0
    for (int off = 8; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    if (m >= N) continue;
    const float inv = 1.0f / total;
    for (int j = sub; j < vn; j += 16) {
      const int64_t at = static_cast<int64_t>(m) * d.V + n0 + j;
      const float v = lg[m * S.vc + j];
      p.logits[at] = v;
      p.probs[at] = expf(v - M) * inv;
    }
  }
  if constexpr (kTrace) {
    __syncthreads();
    trace_report(r, t_entry_ns, p.dims, R);
  }
}


// ---- the device-resident decode loop (gpt_mega_generate, gpt_mega.h) ----
//
// One launch of the decode step's cluster feeds the last prompt token and then every token it
// chooses itself: the weights come into shared memory once for all the tokens, the new k, v rows
// stay in shared memory (written to the cache once, at the end, for later step() calls), and each
// token is chosen by every CTA redundantly or combined from every CTA's pushed candidates (the
// same values in every CTA: the same token), so the next step starts without a host round trip.
// A step is gpt_mega_kernel's decode step (k split, proj by heads) with decode-only shortcuts
// (decode_attention, decode_layer: fewer CTA barriers, one-warp LayerNorms), then the choice:
//   1. greedy: each CTA's first logit (larger, or equal with a lower id) by one warp's
//      butterfly, pushed to every CTA | barrier | the R firsts combined by one warp. Top-k: each
//      CTA ranks its own columns (counts over slices of them, the whole CTA) and pushes its
//      first k, sorted | barrier | every candidate ranked in the union (binary searches in the
//      other CTAs' lists): the top k in the order model/sampling.cpp's partial_sort gives
//   2. one warp: greedy takes the first; sampling weighs them as Sampler::sample (double, exp of
//      (l - lmax) / temperature, summed in order by every lane, each keeping its prefixes), and
//      takes the first whose running sum exceeds u * total, u the host's pre-drawn uniform.
// Diagnostics: with MegaGenerate::trace, CTA 0's thread 0 adds each phase's cycles (clock64)
// up over the launch: slot k < kGenTraceSlots - 1 (the mark(k) calls; the phases are named
// where cuda_gpt.cpp prints them; 12-14 split the attention stage's 2), the last slot the time
// of the previous mark.
constexpr int kGenTraceSlots = 16;
// Extra shared memory after MegaLayout's regions:
struct GenLayout {
  int cl, cid, cn, sl, sid, rk, tok, toks, trace, total;
  __host__ __device__ explicit GenLayout(const MegaLayout& S) {
    int o = S.total;
    auto take = [&o](int n) { const int at = o; o += round4(n); return at; };
    cl = take(S.R * kMegaGenMaxTopK);   // every CTA's candidates' logits (R, kMax), sorted
    cid = take(S.R * kMegaGenMaxTopK);  // their ids (int)
    cn = take(2 * S.R);                 // per CTA: its candidates' count, a NaN flag (int)
    sl = take(kMegaGenMaxTopK);         // the top kk of the union, in order: logits
    sid = take(kMegaGenMaxTopK);        // ... ids
    rk = take(S.vc);                    // this CTA's columns' ranks among its columns (int)
    tok = take(8);                      // the chosen token, status, whether a uniform was used (x 2)
    toks = take(S.kv_rows);             // the generated tokens (int), written out at the end
    trace = take(2 * kGenTraceSlots);   // diagnostics (MegaGenerate::trace): cycles per phase (long long)
    total = o;
  }
};

// (la, ia) comes before (lb, ib) in the sampler's order: larger logit, then lower id.
__device__ __forceinline__ bool comes_first(float la, int ia, float lb, int ib) {
  return la > lb || (la == lb && ia < ib);
}

// LayerNorm of one row of KC floats (v: lane's x[lane + 32 e]) by one warp, into out: mean and
// variance in double as layernorm_rows_t, but in ONE pass (the sum and the sum of squares, a
// butterfly each, side by side), 1/C as a product (exact for C a power of two) and a double
// rsqrt, so the chain is ~5 shuffle steps instead of 2 x 4 plus three double divisions and a
// square root (the decode stage timestamps: ~1k cycles per LayerNorm, 9 per token). The
// statistics differ from the two-pass ones in double's last bits: the floats within an ulp.
template <int KC>
__device__ __forceinline__ void warp_layernorm(const float (&v)[KC / 32], float* out, const float* w, const float* b,
                                               float eps) {
  static_assert(KC > 0 && KC % 32 == 0, "one warp, KC / 32 values per lane");
  constexpr int E = KC / 32;
  const int lane = threadIdx.x & 31;
  double s = 0.0, q = 0.0;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const double dv = v[e];
    s += dv;
    q = fma(dv, dv, q);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, off);
    q += __shfl_xor_sync(0xffffffffu, q, off);
  }
  const double m = s * (1.0 / KC);
  const double var = fmax(q * (1.0 / KC) - m * m, 0.0);
  const float mean = static_cast<float>(m);
  const float rs = static_cast<float>(rsqrt(var + static_cast<double>(eps)));
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int cc = lane + 32 * e;
    out[cc] = (v[e] - mean) * rs * w[cc] + b[cc];
  }
}
template <int KC>
__device__ __forceinline__ void warp_layernorm_row(const float* x, float* out, const float* w, const float* b, float eps) {
  float v[KC / 32];
#pragma unroll
  for (int e = 0; e < KC / 32; ++e) v[e] = x[(threadIdx.x & 31) + 32 * e];
  warp_layernorm<KC>(v, out, w, b, eps);
}

// Stage A of the decode loop's layer l (B = T = 1, proj by heads; attention_stage's decode step
// with fewer CTA barriers): CTA r < H holds head r: ln1 (one warp), the head's q, k, v (k split),
// then ONE warp: the new row's scores, softmax and att (as attention_stage's split_k path) and
// the head's part of proj, att proj.weight[:, head's columns]^T, kept in the warp (attention_stage
// stores att, waits for the CTA and runs it on 16 threads), pushed to every CTA's pp[r].
template <class K, class Mark>
__device__ __forceinline__ void decode_attention(const Ctx& c, int l, bool first, Mark mark) {
  constexpr int DH = K::C / K::H, G = DH / 4;  // the head's columns; lanes per key
  static_assert(K::C > 0 && DH % 4 == 0 && 32 % G == 0, "the shipped dims");
  const MegaLayout& S = c.S;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, R = S.R, pos0 = c.pos0, hh = c.r;
  const bool has_head = c.r < K::H;
  const float* base = c.sm + l * S.layer;
  float* qs = c.sm + S.q;
  float* ks = c.sm + S.kv + l * 2 * S.kv_rows * S.sd;
  float* vs = ks + S.kv_rows * S.sd;
  if (has_head) {
    float* ln = c.sm + S.ln;
    if (warp == 0) warp_layernorm_row<K::C>(c.sm + S.x, ln, base + S.ln1w, base + S.ln1b, c.p.eps);
    __syncthreads();
    mark(12);
    // k, v stay in shared memory: the launch writes every new row to the cache at its end (a
    // global store here would be waited for by the next cluster barrier's release)
    gemm_split_any(ln, S.sC, 1, K::C, base + S.qkv, S.sC, base + S.qkvb, 3 * DH, [&](int, int j0, float4 v) {
      const int part = j0 / DH, d0 = j0 % DH;
      *reinterpret_cast<float4*>((part == 0 ? qs : part == 1 ? ks + pos0 * S.sd : vs + pos0 * S.sd) + d0) = v;
    });
    __syncthreads();
  }
  // the first token: paired with the start's arrive (every CTA is running before the first push);
  // later tokens need none (a push here is 3 cluster barriers after any read of its slot)
  if (l == 0 && first) cluster_wait();
  mark(13);
  if (!has_head || warp != 0) return;
  const int n = pos0 + 1;
  float* row = c.sm + S.sc;
  const float scale = 1.0f / sqrtf(static_cast<float>(DH));
  auto score = [&](int p) { return dot_qk(qs, ks + p * S.sd, DH) * scale; };  // key p's score
  if (n <= 64) {  // warp_softmax_inplace's arithmetic in the same order, the scores in registers
    const bool h0 = lane < n, h1 = lane + 32 < n;
    const float s0 = h0 ? score(lane) : -CUDART_INF_F, s1 = h1 ? score(lane + 32) : -CUDART_INF_F;
    float m = fmaxf(s0, s1);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    const float e0 = h0 ? expf(s0 - m) : 0.0f, e1 = h1 ? expf(s1 - m) : 0.0f;
    float sum = 0.0f;
    if (h0) sum += e0;
    if (h1) sum += e1;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = 1.0f / sum;
    if (h0) row[lane] = e0 * inv;
    if (h1) row[lane + 32] = e1 * inv;
  } else {
    for (int p = lane; p < n; p += 32) row[p] = score(p);
    __syncwarp();
    warp_softmax_inplace(row, n);
  }
  __syncwarp();
  mark(14);
  // att: a lane per (key subset, column group), partials added by a butterfly (att_row_split)
  const float4 a = att_row_split(row, n, vs, S.sd, G, lane);
  // every lane: the head's DH att values (group g's from lane g), then output columns lane,
  // lane + 32, ...: sum over k in order (dot4's order), to every CTA's pp[hh]
  float at[DH];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    at[4 * g] = __shfl_sync(0xffffffffu, a.x, g);
    at[4 * g + 1] = __shfl_sync(0xffffffffu, a.y, g);
    at[4 * g + 2] = __shfl_sync(0xffffffffu, a.z, g);
    at[4 * g + 3] = __shfl_sync(0xffffffffu, a.w, g);
  }
  float* pp = c.sm + S.pp + hh * S.sC;
#pragma unroll
  for (int n0 = 0; n0 < K::C; n0 += 32) {
    const float* wr = base + S.proj + (n0 + lane) * S.sd;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < DH; k += 4) {
      const float4 wv = *reinterpret_cast<const float4*>(wr + k);
      acc = fmaf(at[k], wv.x, acc);
      acc = fmaf(at[k + 1], wv.y, acc);
      acc = fmaf(at[k + 2], wv.z, acc);
      acc = fmaf(at[k + 3], wv.w, acc);
    }
    push1(pp + n0 + lane, acc, R);
  }
}

// gemm_split's sums for ONE row (the decode loop), finished per column: lane sub < 4 of each
// group of W lanes gets column j0 + sub's sum + bias (gemm_split's lane 0 gets all four), so the
// epilogue (GELU, the pushes to every CTA) runs on four lanes side by side. Same sums.
template <int W, class Finish>
__device__ __forceinline__ void row_split(const float* a, int K, const float* w, int ldw, const float* bias, int cols,
                                          Finish finish) {
  const int units = cols / 4, lane = threadIdx.x & 31, sub = lane % W;
  for (int u0 = static_cast<int>(threadIdx.x >> 5) * (32 / W); u0 < units; u0 += kThreads / W) {
    const int u = u0 + lane / W, j0 = (u < units ? u : units - 1) * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    dot4_split<W>(a, w + j0 * ldw, ldw, K, sub, acc);
    if (u < units && sub < 4) {
      const float v = sub == 0 ? acc[0] : sub == 1 ? acc[1] : sub == 2 ? acc[2] : acc[3];
      finish(j0 + sub, v + bias[j0 + sub]);
    }
  }
}

// One decode layer of the loop at c.pos0 (B = T = 1, k split, proj by heads): gpt_mega_kernel's
// layer body with decode_attention, x += proj + b and ln2 in one warp (registers), and fc1's and
// fc2's epilogues on four lanes per group (row_split). The same sums as the step's.
template <class K, class Mark>
__device__ __forceinline__ void decode_layer(const Ctx& c, int l, bool first, Mark mark) {
  const MegaLayout& S = c.S;
  const int tid = threadIdx.x, R = S.R;
  float* x = c.sm + S.x;
  const float* base = c.sm + l * S.layer;
  decode_attention<K>(c, l, first, mark);
  mark(2);
  cluster_sync_all();
  mark(3);
  float* ln = c.sm + S.ln;
  float* h = c.sm + S.h;
  if (tid < 32) {  // x += (the heads' partials, summed in head order) + b; ln2
    const float* pp = c.sm + S.pp;
    float v[K::C / 32];
#pragma unroll
    for (int e = 0; e < K::C / 32; ++e) {
      const int n = tid + 32 * e;
      float sum = 0.0f;
#pragma unroll
      for (int hh = 0; hh < K::H; ++hh) sum += pp[hh * S.sC + n];
      v[e] = (sum + base[S.projb + n]) + x[n];
      x[n] = v[e];
    }
    warp_layernorm<K::C>(v, ln, base + S.ln2w, base + S.ln2b, c.p.eps);
  }
  __syncthreads();
  mark(4);
  const int f0 = c.r * S.fc, n0 = c.r * S.pc;
  static_assert(split_width(K::C) > 0 && split_width(K::F) > 0, "the shipped dims split");
  row_split<split_width(K::C)>(ln, K::C, base + S.fc1, S.sC, base + S.fc1b, S.fc,
                               [&](int j, float v) { push1(h + f0 + j, gelu_erf(v), R); });
  mark(5);
  cluster_sync_all();
  mark(6);
  row_split<split_width(K::F)>(h, K::F, base + S.fc2, S.sF, base + S.fc2b, S.pc,
                               [&](int j, float v) { push1(x + n0 + j, v + x[n0 + j], R); });  // (sum + b) + x
  cluster_sync_all();
  mark(7);
}

// The better of (v, id) and lane ^ off's, for off = 16 .. 1: every lane ends with the warp's first
// in the sampler's order. An empty lane holds (-inf, INT_MAX).
__device__ __forceinline__ void warp_first(float& v, int& id) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, off);
    const int i2 = __shfl_xor_sync(0xffffffffu, id, off);
    if (comes_first(v2, i2, v, id)) {
      v = v2;
      id = i2;
    }
  }
}

// Steps 1 and 2 of the choice (above): the top kk of the whole row into sl, sid; true if a
// logit is NaN. kk == 1 (greedy): each CTA's first by one warp (a butterfly), the R firsts
// combined by one warp: sl, sid and the flag are then warp 0's only (the draw's warp). kk > 1:
// every CTA's local ranks counted by the whole CTA (a column's rank as the sum of its counts
// over slices of the other columns), the union ranked by binary searches; every thread.
__device__ __forceinline__ bool gen_top(const Ctx& c, const GenLayout& G, const float* lg, int vn, int kk) {
  const int tid = threadIdx.x, lane = tid & 31, R = c.S.R, r = c.r, n0 = r * c.S.vc;
  float *cl = c.sm + G.cl, *cid = c.sm + G.cid, *cn = c.sm + G.cn, *sl = c.sm + G.sl;
  int* sid = reinterpret_cast<int*>(c.sm + G.sid);
  if (kk == 1) {
    if (tid < 32) {
      float v = -CUDART_INF_F;
      int id = INT_MAX;
      bool nan = false;
      for (int j = lane; j < vn; j += 32) {
        const float lj = lg[j];
        nan = nan || isnan(lj);
        if (comes_first(lj, n0 + j, v, id)) {
          v = lj;
          id = n0 + j;
        }
      }
      warp_first(v, id);
      nan = __any_sync(0xffffffffu, nan);
      if (lane == 0) {
        push1(cl + r * kMegaGenMaxTopK, v, R);
        push1(cid + r * kMegaGenMaxTopK, __int_as_float(id), R);
        push1(cn + 2 * r + 1, __int_as_float(nan ? 1 : 0), R);
      }
    }
    cluster_sync_all();
    if (tid >= 32) return false;
    float v = -CUDART_INF_F;
    int id = INT_MAX;
    bool nan = false;
    if (lane < R) {
      v = cl[lane * kMegaGenMaxTopK];
      id = __float_as_int(cid[lane * kMegaGenMaxTopK]);
      nan = __float_as_int(cn[2 * lane + 1]) != 0;
    }
    warp_first(v, id);
    if (lane == 0) {
      sl[0] = v;
      sid[0] = id;
    }
    nan = __any_sync(0xffffffffu, nan);
    __syncwarp();
    return nan;
  }
  int* rk = reinterpret_cast<int*>(c.sm + G.rk);
  for (int j = tid; j < vn; j += kThreads) rk[j] = 0;
  const bool nan = __syncthreads_or(tid < vn && isnan(lg[tid]));
  const int parts = max(1, kThreads / max(vn, 1)), len = ceil_div(vn, parts);
  for (int t = tid; t < vn * parts; t += kThreads) {  // column j against slice `part` of the columns
    const int j = t % vn, part = t / vn, i1 = min(vn, (part + 1) * len);
    const float v = lg[j];
    int count = 0;
#pragma unroll 4
    for (int i = part * len; i < i1; ++i) count += comes_first(lg[i], i, v, j);
    if (count) atomicAdd(&rk[j], count);
  }
  __syncthreads();
  for (int j = tid; j < vn; j += kThreads) {
    if (rk[j] < kk) {
      push1(cl + r * kMegaGenMaxTopK + rk[j], lg[j], R);
      push1(cid + r * kMegaGenMaxTopK + rk[j], __int_as_float(n0 + j), R);
    }
  }
  if (tid == 0) {
    push1(cn + 2 * r, __int_as_float(min(kk, vn)), R);
    push1(cn + 2 * r + 1, __int_as_float(nan ? 1 : 0), R);
  }
  cluster_sync_all();
  bool any_nan = false;
  for (int q = 0; q < R; ++q) any_nan = any_nan || __float_as_int(cn[2 * q + 1]) != 0;
  for (int t = tid; t < R * kMegaGenMaxTopK; t += kThreads) {
    const int q = t / kMegaGenMaxTopK, i = t % kMegaGenMaxTopK;
    if (i >= __float_as_int(cn[2 * q])) continue;
    const float v = cl[t];
    const int id = __float_as_int(cid[t]);
    int rank = i;
    // list q2's entries before (v, id) are a prefix of it: its length by a fixed-step binary
    // search (the R searches unrolled side by side: 7 dependent loads, not 7 R)
#pragma unroll
    for (int q2 = 0; q2 < 16; ++q2) {
      if (q2 >= R || q2 == q) continue;
      const float* l2 = cl + q2 * kMegaGenMaxTopK;
      const float* i2 = cid + q2 * kMegaGenMaxTopK;
      const int cnt = __float_as_int(cn[2 * q2]);
      int lo = 0;
#pragma unroll
      for (int step = kMegaGenMaxTopK; step > 0; step >>= 1)
        if (lo + step <= cnt && comes_first(l2[lo + step - 1], __float_as_int(i2[lo + step - 1]), v, id)) lo += step;
      rank += lo;
    }
    if (rank < kk) {
      sl[rank] = v;
      sid[rank] = id;
    }
  }
  __syncthreads();
  return any_nan;
}

static_assert(kMegaGenMaxTopK <= 64, "gen_draw: two candidates per lane");
// Step 3 (warp 0): the token from the top kk, as Sampler::sample; *status 2: every logit -inf.
// *drew: the uniform u was used (the CPU draws only then).
__device__ __forceinline__ int gen_draw(const Ctx& c, const GenLayout& G, int kk, float temperature, double u,
                                        int* status, bool* drew) {
  const int lane = threadIdx.x & 31;
  const float* sl = c.sm + G.sl;
  const int* sid = reinterpret_cast<const int*>(c.sm + G.sid);
  *drew = false;
  if (temperature == 0.0f) return sid[0];
  const double lmax = sl[0];
  if (lmax == -CUDART_INF) {
    *status = 2;
    return sid[0];
  }
  if (lmax == CUDART_INF) return sid[0];  // an infinite logit takes all the mass
  // the weights (lane i: candidates i, i + 32), then their running sum in candidate order, as
  // the CPU's loop (every lane adds the same terms in the same order; each keeps its prefixes)
  const double t = static_cast<double>(temperature);
  const double w0 = lane < kk ? exp((static_cast<double>(sl[lane]) - lmax) / t) : 0.0;
  const double w1 = lane + 32 < kk ? exp((static_cast<double>(sl[lane + 32]) - lmax) / t) : 0.0;
  double acc = 0.0, p0 = 0.0, p1 = 0.0;
#pragma unroll 8
  for (int i = 0; i < kk; ++i) {
    acc += __shfl_sync(0xffffffffu, i < 32 ? w0 : w1, i & 31);
    if (i == lane) p0 = acc;
    if (i == lane + 32) p1 = acc;
  }
  const double rr = u * acc;  // acc: the total
  int first = kk - 1;         // r on the rounding edge of the total: the last
  unsigned bits = __ballot_sync(0xffffffffu, lane < kk && rr < p0);
  if (bits) {
    first = __ffs(static_cast<int>(bits)) - 1;
  } else {
    bits = __ballot_sync(0xffffffffu, lane + 32 < kk && rr < p1);
    if (bits) first = 32 + __ffs(static_cast<int>(bits)) - 1;
  }
  *drew = true;
  return sid[first];
}

template <class K>
__global__ void __launch_bounds__(kThreads, 1)
    gpt_mega_generate_kernel(const __grid_constant__ MegaParams p, const __grid_constant__ MegaGenerate g, int R) {
  extern __shared__ __align__(16) float sm[];
  const MegaDims d = fixed_dims<K>(p.dims);
  const MegaLayout S(d, R);
  const GenLayout G(S);
  const int r = static_cast<int>(cluster_ctarank()), tid = threadIdx.x, C = d.C;
  Ctx c{p, d, S, sm, r, p.position};
  auto* tr = reinterpret_cast<long long*>(sm + G.trace);
  const bool tracing = g.trace && r == 0 && tid == 0;
  if (tracing) {
    for (int k = 0; k < kGenTraceSlots; ++k) tr[k] = 0;
    tr[kGenTraceSlots - 1] = clock64();
  }
  auto mark = [&](int k) {
    if (tracing) {
      const long long now = clock64();
      tr[k] += now - tr[kGenTraceSlots - 1];
      tr[kGenTraceSlots - 1] = now;
    }
  };

  // the weights: a bulk copy per group, as gpt_mega_kernel, once for every token
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + S.bars);
  if (tid == 0) issue_weight_copies(sm, bars, S, d.L, p.image + static_cast<int64_t>(r) * S.x);
  __syncthreads();
  cluster_arrive();  // waited on in layer 0's attention stage (every CTA's shared memory exists)

  // the earlier positions' k, v of this CTA's head, every layer (B = 1: item r, head r)
  int pos = p.position;
  if (r < d.H) {
    const int dh = S.dh, q = dh / 4, n = d.L * 2 * pos * q;  // float4s: (layer, k|v, position, quarter)
    for (int i = tid; i < n; i += kThreads) {
      const int e = (i % q) * 4, ps = (i / q) % pos, kv = (i / q / pos) % 2, l = i / q / pos / 2;
      const float* cache = kv == 0 ? p.layers[l].k_cache : p.layers[l].v_cache;
      const float4 v = *reinterpret_cast<const float4*>(cache + static_cast<int64_t>(ps) * C + r * dh + e);
      *reinterpret_cast<float4*>(sm + S.kv + (l * 2 + kv) * S.kv_rows * S.sd + ps * S.sd + e) = v;
    }
  }

  __syncthreads();
  mark(0);
  const int kk = g.temperature == 0.0f ? 1 : g.top_k;
  const int n0 = r * S.vc, vn = max(0, min(S.vc, d.V - n0)), groups = ceil_div(vn, 4);
  float* x = sm + S.x;
  float* ln = sm + S.ln;
  float* lg = sm + S.lg;
  int* tok_slot = reinterpret_cast<int*>(sm + G.tok);
  int count = 0, draws = 0, fed = 0, stop = 0, status = 0;
  auto embed = [&](int id, int ps) {  // x = wte[id] + wpe[ps], this thread's 4 columns (tid < C/4)
    const float4 te = __ldg(reinterpret_cast<const float4*>(p.wte + static_cast<int64_t>(id) * C) + tid);
    const float4 pe = __ldg(reinterpret_cast<const float4*>(p.wpe + static_cast<int64_t>(ps) * C) + tid);
    *reinterpret_cast<float4*>(x + 4 * tid) = add4(te, pe);
  };
  for (bool first = true;; first = false) {
    c.pos0 = pos;
    // the uniform this token may use, loaded now (used at the end of the step)
    const double u = (g.temperature != 0.0f && draws < g.n) ? g.uniforms[draws] : 0.0;
    if (first) {  // x = wte[tok] + wpe[pos]; later tokens: embedded by the choosing warp (below)
      if (tid < C / 4) embed(g.first_id, pos);
      __syncthreads();
    }
    mark(1);
    for (int l = 0; l < d.L; ++l) {
      if (first) {  // later: the weights are in, and the last cluster barrier ordered x
        wait_group(bars, l);
        __syncthreads();
      }
      decode_layer<K>(c, l, first, mark);
    }
    if (first) {
      wait_group(bars, d.L);
      __syncthreads();
    }
    const float* hd = sm;
    if (tid < 32) warp_layernorm_row<K::C>(x, ln, hd + S.lnfw, hd + S.lnfb, p.eps);
    __syncthreads();
    float* out = g.step_logits ? g.step_logits + static_cast<int64_t>(fed) * d.V + n0 : nullptr;
    gemm_split_any(ln, S.sC, 1, C, hd + S.lm, S.sC, hd + S.lmb, groups * 4, [&](int, int j0, float4 v) {
      const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j0 + j < vn) {
          lg[j0 + j] = vv[j];
          if (out) out[j0 + j] = vv[j];
        }
    });
    __syncthreads();
    mark(8);
    ++fed;
    if (count == g.n) break;  // the host loop feeds the n-th token too, then stops
    const bool nan = gen_top(c, G, lg, vn, kk);
    mark(9);
    if (tid < 32) {
      int st = nan ? 1 : 0;
      bool drew = false;
      const int id = gen_draw(c, G, kk, g.temperature, u, &st, &drew);
      // the next step's x now, while the others wait (if there is a next step)
      if (tid < C / 4 && st == 0 && id != g.eos && pos + 1 < d.capacity) embed(id, pos + 1);
      if (tid == 0) {
        tok_slot[4 * (count & 1)] = id;
        tok_slot[4 * (count & 1) + 1] = st;
        tok_slot[4 * (count & 1) + 2] = drew;
      }
    }
    __syncthreads();
    mark(10);
    const int id = tok_slot[4 * (count & 1)];  // two slots by token parity: no barrier before the next write
    status = tok_slot[4 * (count & 1) + 1];
    draws += tok_slot[4 * (count & 1) + 2];
    if (status != 0) break;
    if (id == g.eos) {
      stop = 1;
      break;
    }
    if (tid == 0) reinterpret_cast<int*>(sm + G.toks)[count] = id;
    ++count;
    if (pos + 1 == d.capacity) {
      stop = 2;
      break;
    }
    ++pos;
    mark(11);
  }
  // the new k, v rows (positions p.position .. pos) into the cache, for later steps; the tokens
  __syncthreads();
  if (r < d.H) {
    const int dh = S.dh, q = dh / 4, rows = pos + 1 - p.position, n = d.L * 2 * rows * q;
    for (int i = tid; i < n; i += kThreads) {
      const int e = (i % q) * 4, ps = p.position + (i / q) % rows, kv = (i / q / rows) % 2, l = i / q / rows / 2;
      float* cache = kv == 0 ? p.layers[l].k_cache : p.layers[l].v_cache;
      *reinterpret_cast<float4*>(cache + static_cast<int64_t>(ps) * C + r * dh + e) =
          *reinterpret_cast<const float4*>(sm + S.kv + (l * 2 + kv) * S.kv_rows * S.sd + ps * S.sd + e);
    }
  }
  if (r == 0)
    for (int i = tid; i < count; i += kThreads) g.tokens[i] = reinterpret_cast<const int*>(sm + G.toks)[i];
  if (tracing) {
    for (int k = 0; k < kGenTraceSlots - 1; ++k) g.trace[k] = tr[k];
    g.trace[kGenTraceSlots - 1] = fed;
  }
  if (r == 0 && tid == 0) {
    g.result[0] = count;
    g.result[1] = stop;
    g.result[2] = status;
    g.result[3] = pos + 1;  // positions fed: the decoder's position after the launch
  }
}

bool split_applies(const MegaDims& d, int R) {
  if (R < 1 || R > 16 || d.L < 1 || d.L > kMegaMaxLayers || d.B < 1 || d.T < 1 || d.H < 1 || d.C < 4 ||
      d.F < 4 || d.V < 1)
    return false;
  if (d.C % d.H != 0 || (d.C / d.H) % 4 != 0 || R % d.H != 0 || d.C % (4 * R) != 0 || d.F % (4 * R) != 0) return false;
  if (d.cache && (d.B * d.H > R || d.capacity < d.T)) return false;
  if (!d.cache && d.capacity != d.T) return false;
  return static_cast<int64_t>(d.B) * d.T <= 4096;
}

int optin_smem() {
  int dev = 0, bytes = 48 * 1024;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  MINIGPT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

cudaLaunchConfig_t launch_config(int R, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(R));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(R);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

using MegaKernel = void (*)(MegaParams, int);

// The kernel for d: specialised for the shipped architecture (C 64, H 4, F 256), else generic.
// Both do the same arithmetic in the same order: the logits do not depend on which one runs.
MegaKernel kernel_for(const MegaDims& d) {
  static const bool trace = std::getenv("MINIGPT_MEGA_TRACE") != nullptr;  // diagnostics, read once
  if (d.C == 64 && d.H == 4 && d.F == 256)
    return d.split_k ? (trace ? gpt_mega_kernel<Fixed<64, 4, 256>, true, true> : gpt_mega_kernel<Fixed<64, 4, 256>, true>)
                     : (trace ? gpt_mega_kernel<Fixed<64, 4, 256>, false, true> : gpt_mega_kernel<Fixed<64, 4, 256>, false>);
  return d.split_k ? gpt_mega_kernel<Fixed<0, 0, 0>, true> : gpt_mega_kernel<Fixed<0, 0, 0>, false>;
}

// Raises the kernel's limits to what (R, smem) need; false if the device cannot. The shared
// memory limit is always set to the device's maximum: a graph captured with a larger launch
// must stay valid after a smaller shape is prepared.
bool prepare_kernel(MegaKernel kernel, int R, size_t smem) {
  const int optin = optin_smem();
  if (smem > static_cast<size_t>(optin)) return false;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (R > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace

size_t gpt_mega_smem(const MegaDims& d, int R) {
  if (!split_applies(d, R)) return 0;
  return static_cast<size_t>(MegaLayout(d, R).total) * sizeof(float);
}

size_t gpt_mega_image_floats(const MegaDims& d, int R) {
  if (!split_applies(d, R)) return 0;
  return static_cast<size_t>(R) * static_cast<size_t>(MegaLayout(d, R).x);
}

void gpt_mega_pack(const MegaParams& p, int R, float* image, cudaStream_t stream) {
  const size_t floats = gpt_mega_image_floats(p.dims, R);
  MINIGPT_CUDA_REQUIRE(floats > 0 && image, "gpt_mega_pack: the shape does not split over a cluster of ", R,
                       " or the image is null");
  MINIGPT_CUDA_CHECK(cudaMemsetAsync(image, 0, floats * sizeof(float), stream));
  gpt_mega_pack_kernel<<<R, kThreads, 0, stream>>>(p, R, image);
  MINIGPT_CUDA_CHECK(cudaGetLastError());
}

int gpt_mega_cluster(const MegaDims& d, int requested) {
  MINIGPT_CUDA_REQUIRE(requested >= 0 && requested <= 16, "gpt_mega: cluster size ", requested, " is outside [0, 16]");
  for (int R : {16, 8, 4, 2, 1}) {
    if (requested != 0 && R != requested) continue;
    const size_t smem = gpt_mega_smem(d, R);
    if (smem == 0 || !prepare_kernel(kernel_for(d), R, smem)) continue;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = launch_config(R, smem, nullptr, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel_for(d), &cfg) != cudaSuccess || clusters < 1) {
      cudaGetLastError();
      continue;
    }
    return R;
  }
  return 0;
}

void gpt_mega(const MegaParams& p, int R, cudaStream_t stream) {
  const MegaDims& d = p.dims;
  const size_t smem = gpt_mega_smem(d, R);
  MINIGPT_CUDA_REQUIRE(smem > 0, "gpt_mega: the shape (B=", d.B, ", T=", d.T, ", C=", d.C, ", H=", d.H,
                       ") does not split over a cluster of ", R);
  MINIGPT_CUDA_REQUIRE(p.image && (reinterpret_cast<uintptr_t>(p.image) & 15u) == 0,
                       "gpt_mega: no weight image (gpt_mega_pack), or one not 16-byte aligned");
  MINIGPT_CUDA_REQUIRE((p.ids || d.B * d.T == 1) && p.wte && p.wpe && p.ln_f_weight && p.ln_f_bias && p.lm_head_weight && p.lm_head_bias &&
                           p.logits,
                       "gpt_mega: null pointer");
  for (int l = 0; l < d.L; ++l) {
    const MegaLayer& w = p.layers[l];
    MINIGPT_CUDA_REQUIRE(w.ln1_weight && w.ln1_bias && w.qkv_weight && w.qkv_bias && w.proj_weight && w.proj_bias &&
                             w.ln2_weight && w.ln2_bias && w.fc1_weight && w.fc1_bias && w.fc2_weight && w.fc2_bias &&
                             (!d.cache || (w.k_cache && w.v_cache)),
                         "gpt_mega: null pointer in layer ", l);
  }
  MINIGPT_CUDA_REQUIRE(prepare_kernel(kernel_for(d), R, smem), "gpt_mega: ", smem, " bytes of shared memory at cluster size ", R,
                       " do not fit the device");
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(R, smem, stream, attr);
  MINIGPT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_for(d), p, R));
}

void gpt_mega_set_node_params(cudaGraphExec_t exec, cudaGraphNode_t node, const MegaParams& p, int R) {
  // the launch gpt_mega enqueued, with new arguments (its cluster shape is the node's attribute,
  // which the update keeps)
  MegaParams args = p;
  int r = R;
  void* params[] = {&args, &r};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(kernel_for(p.dims));
  kp.gridDim = dim3(static_cast<unsigned>(R));
  kp.blockDim = dim3(kThreads);
  kp.sharedMemBytes = static_cast<unsigned>(gpt_mega_smem(p.dims, R));
  kp.kernelParams = params;
  MINIGPT_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &kp));
}

// ---- the device-resident decode loop: host side ----

size_t gpt_mega_generate_smem(const MegaDims& d, int R) {
  if (!(d.C == 64 && d.H == 4 && d.F == 256) || !d.cache || !d.split_k || !d.head_proj || d.B != 1 || d.T != 1 ||
      !split_applies(d, R))
    return 0;
  return static_cast<size_t>(GenLayout(MegaLayout(d, R)).total) * sizeof(float);
}

namespace {
using GenerateKernel = void (*)(MegaParams, MegaGenerate, int);
GenerateKernel generate_kernel() { return gpt_mega_generate_kernel<Fixed<64, 4, 256>>; }

bool prepare_generate(int R, size_t smem) {
  const int optin = optin_smem();
  if (smem == 0 || smem > static_cast<size_t>(optin)) return false;
  if (cudaFuncSetAttribute(generate_kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess ||
      (R > 8 && cudaFuncSetAttribute(generate_kernel(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)) {
    cudaGetLastError();
    return false;
  }
  return true;
}
}  // namespace

bool gpt_mega_generate_fits(const MegaDims& d, int R) {
  const size_t smem = gpt_mega_generate_smem(d, R);
  if (!prepare_generate(R, smem)) return false;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(R, smem, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, generate_kernel(), &cfg) != cudaSuccess || clusters < 1) {
    cudaGetLastError();
    return false;
  }
  return true;
}

void gpt_mega_generate(const MegaParams& p, const MegaGenerate& g, int R, cudaStream_t stream) {
  const MegaDims& d = p.dims;
  const size_t smem = gpt_mega_generate_smem(d, R);
  MINIGPT_CUDA_REQUIRE(smem > 0, "gpt_mega_generate: the decode loop takes the decode step of the shipped dims (C 64, H 4, "
                       "F 256, k split), not this shape at cluster size ", R);
  MINIGPT_CUDA_REQUIRE(p.image && (reinterpret_cast<uintptr_t>(p.image) & 15u) == 0, "gpt_mega_generate: no weight image");
  const int kk = g.temperature == 0.0f ? 1 : g.top_k;
  MINIGPT_CUDA_REQUIRE(kk >= 1 && kk <= kMegaGenMaxTopK && kk <= d.V, "gpt_mega_generate: top-k ", g.top_k,
                       " outside [1, ", kMegaGenMaxTopK, "] or past the vocabulary");
  MINIGPT_CUDA_REQUIRE(g.n >= 0 && g.tokens && g.result && (g.n == 0 || g.temperature == 0.0f || g.uniforms),
                       "gpt_mega_generate: null output or uniforms");
  MINIGPT_CUDA_REQUIRE(p.position >= 0 && p.position < d.capacity && p.position < d.P && g.first_id >= 0 &&
                           g.first_id < d.V,
                       "gpt_mega_generate: position ", p.position, " or token ", g.first_id, " out of range");
  MINIGPT_CUDA_REQUIRE(prepare_generate(R, smem), "gpt_mega_generate: ", smem, " bytes of shared memory at cluster size ", R,
                       " do not fit the device");
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(R, smem, stream, attr);
  MINIGPT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, generate_kernel(), p, g, R));
}

}  // namespace minigpt::cuda
