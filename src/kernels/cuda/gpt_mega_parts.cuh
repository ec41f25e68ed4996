// The building blocks gpt_mega.h's kernels share: gpt_mega.cu's forward / decode step
// (gpt_mega_kernel), gpt_mega_generate.cu's device decode loop and gpt_mega_rows.cu's row-split
// forward. Internal: included by those three files only; an unnamed namespace, so each gets its own copy (inline device code, the layout).
// One cluster of R CTAs, 512 threads each.
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
//   weight group; the token ids.
#pragma once

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

// Whether a launch's stages hand over point to point (Net<true>): the forward (no KV cache, sums
// in k order) of the shipped architecture, proj by heads or by columns, fc2 by k (F / R a
// multiple of kFc2Slice at every R <= 16). The decode step and other dims keep the cluster
// barriers (gpt_mega_kernel's kP2P instance: the forward only).
__host__ __device__ constexpr bool mega_p2p(const MegaDims& d) {
  return !d.cache && !d.split_k && d.C == 64 && d.H == 4 && d.F == 256;
}
// Net's mbarriers: att (stage A -> B: att, or by heads the proj partials), x1 (B -> C), p2 (C ->
// D), x (D -> the next layer), stats (the softmax's pairs)
constexpr int kNetBars = 5;
enum NetBar { kBarAtt = 0, kBarX1 = 1, kBarP2 = 2, kBarX = 3, kBarStats = 4 };

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
  // The forward's stages handed over point to point (mega_p2p, Net below). Its layout adds x1,
  // the residual between proj and fc2 (x holds the layer's input and fc2's output: two buffers,
  // so that one CTA's pushes of two consecutive stages never write the same address while the
  // first may still be in flight), the stages' mbarriers, and by heads holds only this CTA's
  // columns of every item's proj partial.
  bool p2p;
  // per layer, relative to layer l's base = l * layer
  int ln1w, ln1b, ln2w, ln2b, qkv, qkvb, proj, projb, fc1, fc1b, fc2, fc2b, layer;
  // absolute (head: where the head's regions start)
  int head, lnfw, lnfb, lm, lmb, x, x1, att, ln, h, part, p2, pp, lg, stats, q, kv, sc, bars, nbars, ids, total;

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
    p2p = mega_p2p(d);
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
    x = take(N * sC); x1 = take(p2p ? N * sC : 0); att = take(N * sC); ln = take(N * sC); h = take(N * sF);
    part = take(N * max3(pc * ns, fc * ceil_div(d.C, kSlice), pc * ceil_div(d.C, kSlice)));
    p2 = take(fc2k ? ns2 * N * pc : 0);  // fc2 by k: the partials of this CTA's columns (slice, N, pc)
    // proj by heads: each head's partial (H, N, C+4); with p2p only this CTA's columns (H, N, pc)
    pp = take(d.head_proj ? d.H * N * (mega_p2p(d) ? pc : sC) : 0);
    lg = take(N * vc);
    stats = take(2 * R * N);
    q = take(d.T * sd);
    kv = take(kv_layers * 2 * kv_rows * sd);
    sc = take(d.T * (kv_rows + 1));
    bars = take(2 * (d.L + 1));  // an mbarrier (8 bytes) per weight group: the layers', the head's
    nbars = take(p2p ? 2 * kNetBars : 0);  // mega_p2p: an mbarrier per stage (Net)
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

__device__ __forceinline__ unsigned shared_addr_in(const void* local, unsigned rank) {
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
// The start's cluster arrival, without a release fence: what it announces (this CTA runs: its
// shared memory and mbarriers exist; remote CTAs only write here after the matching wait, never
// read) needs no ordering of this CTA's earlier stores, and the mbarriers' initialisation is
// published by fence.mbarrier_init (CUTLASS's pairing: that fence, then a relaxed arrive). With
// .release (MEMBAR.ALL.GPU + ERRBAR, every thread, after the embedding's global loads) it took
// ~1.5k of the forward's first 4.1k cycles (H200, stage trace; docs/MEGAKERNEL.md "fences").
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
  cluster_arrive();
  cluster_wait();
}

// ---- a stage's hand-over: cluster barriers, or point to point (mega_p2p) ----
//
// Net<false>: the pushes above, and a cluster barrier after each stage (every CTA waits for
// every CTA). Net<true> (the forward of the shipped architecture): each remote store is an
// st.async completing on the receiving CTA's mbarrier for the stage (complete_tx, the bytes it
// wrote); this CTA's own share is a plain store. A stage's receiver waits for its mbarrier alone:
// one arrival (its thread 0, announcing the bytes it receives from the others) and the bytes,
// __syncthreads for its own share: no cluster-wide round trip, and no release fence waiting for
// every remote store's acknowledgement before the arrival (the 4 cluster barriers per layer
// took ~1.2-1.7k cycles each, stage timestamps). Phases alternate per layer (parity l & 1); a
// sender's stores of layer l + 1 cannot reach a receiver before the receiver's phase of layer l
// completed, nor overwrite a buffer it still reads: every stage's sends depend on data that
// every CTA (the receiver included) pushes only after it has read the previous stage's buffers
// (the x pushes of stages B and D go to every CTA from every CTA; x and x1 apart so that one
// CTA's consecutive residual pushes never share an address). The mbarriers are initialised
// before the start's cluster barrier, which every CTA passes before its first send. The arrival
// may come after some of the bytes (the tx-count goes below zero meanwhile; the phase cannot
// complete before the arrival).
__device__ __forceinline__ void st_async4(unsigned remote, float4 v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   remote),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void st_async2(unsigned remote, float2 v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(remote),
               "f"(v.x), "f"(v.y), "r"(remote_bar)
               : "memory");
}
// A hand-over's two halves (Net::wait below, gpt_mega_rows.cu's k, v exchange): one thread's
// arrival announcing the `bytes` the other CTAs' st.async will complete on `bar` (relaxed: it
// publishes nothing, see Net::wait), and every thread's wait for phase `parity`, acquiring the
// remote stores at cluster scope.
__device__ __forceinline__ void stage_arrive(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(detail::smem_address(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void stage_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(detail::smem_address(bar)),
      "r"(parity)
      : "memory");
}
template <bool kP2P>
struct Net {
  uint64_t* bars;  // kP2P: this CTA's kNetBars stage mbarriers (the same offsets in every CTA)
  int R, r;
  // v into the slot `local` names in every CTA of the cluster (this one included)
  __device__ __forceinline__ void all4(float* local, float4 v, int bar) const {
    if constexpr (!kP2P) {
      push4(local, v, R);
    } else {
      for (int q = 0; q < R; ++q) {
        if (q == r)
          *reinterpret_cast<float4*>(local) = v;
        else
          st_async4(shared_addr_in(local, q), v, shared_addr_in(bars + bar, q));
      }
    }
  }
  // v into the slot `local` names in CTA `rank` only
  __device__ __forceinline__ void one4(float* local, float4 v, unsigned rank, int bar) const {
    if constexpr (!kP2P) {
      store_remote4(local, v, rank);
    } else if (static_cast<int>(rank) == r) {
      *reinterpret_cast<float4*>(local) = v;
    } else {
      st_async4(shared_addr_in(local, rank), v, shared_addr_in(bars + bar, rank));
    }
  }
  __device__ __forceinline__ void one2(float* local, float2 v, unsigned rank, int bar) const {
    if constexpr (!kP2P) {
      store_remote2(local, v, rank);
    } else if (static_cast<int>(rank) == r) {
      *reinterpret_cast<float2*>(local) = v;
    } else {
      st_async2(shared_addr_in(local, rank), v, shared_addr_in(bars + bar, rank));
    }
  }
  // Every thread: until stage `bar`'s data of phase `parity` is here, `bytes` from the other CTAs
  // (kP2P; else a cluster barrier). The arrival is relaxed at CTA scope: it publishes nothing (this
  // CTA's own share is ordered by the __syncthreads before it; the other CTAs' bytes by their
  // st.async's complete_tx, which the wait acquires at cluster scope). As release.cluster it cost
  // thread 0 a MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before every arrival, i.e. the round trip of
  // its own remote stores on every stage's critical path (H200: forward 42.8 -> 39.4 us with the
  // start's relaxed cluster arrival, docs/MEGAKERNEL.md "fences"). The wait's acquire at CTA scope (no
  // CCTL.IVALL) measured no faster, so it stays .cluster.
  __device__ __forceinline__ void wait(int bar, unsigned bytes, unsigned parity) const {
    if constexpr (!kP2P) {
      cluster_sync_all();
    } else {
      __syncthreads();  // this CTA's own share (plain stores) is written
      if (threadIdx.x == 0) stage_arrive(bars + bar, bytes);
      stage_wait(bars + bar, parity);
    }
  }
};

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
// The statistics in double as layernorm.cuh's warp_row_stats, but in ONE pass, as the decode
// loop's warp_layernorm (gpt_mega_generate.cu): each lane's sum and sum of squares side by side,
// a 16-lane butterfly for both at once, the variance as E[x^2] - mean^2 (clamped at 0), 1/C as a
// product (exact for C a power of two), and 1/sigma as a float rsqrtf of the double variance
// (+ eps) rounded to float: 4 shuffle steps and one MUFU where the two-pass form had 8 steps,
// three double divisions and a square root. Double's last bits differ from the two-pass
// statistics; the mean stays within an ulp, 1/sigma within rsqrtf's 2 ulps. Measured (H200, stage
// timestamps): ~1.1-1.3k -> ~0.85-1.1k cycles per LayerNorm (one pass); the float rsqrtf and the
// row's values kept in registers (not read again for the output): ln2 1.05k -> 0.9-0.94k, ln1
// 0.88k -> 0.75k (docs/MEGAKERNEL.md "layernorm"). 8 lanes per row (3 steps, 8 values per lane) measured
// the same as 16 (forward 43.4 / 43.6 us against 43.4 / 43.8), so not kept; float statistics
// (two-pass, or one pass shifted by the row's first value) were faster still but not kept: their
// rounding depends on the lanes' split, so the device loop's 32-lane LayerNorms no longer matched
// the step's 16-lane ones (3.8e-6 / 4.8e-6 against the test's 1e-6), and the shifted one's
// logits moved away from the CPU's (1.05e-5 -> 1.5e-5).
// KC > 0: C == KC, inlined (the row's values in registers, the loops unrolled); KC == 0: one
// not-inlined copy for the generic kernel's three call sites.
// The one-pass statistics of a row spread over W lanes (xor-butterfly neighbours): each lane's
// partial sum s and sum of squares q of its values in double -> (mean, 1/sigma) as floats, in
// every lane. inv_c = 1 / C (exact for C a power of two).
template <int W>
__device__ __forceinline__ float2 row_stats_one_pass(double s, double q, double inv_c, float eps) {
#pragma unroll
  for (int off = W / 2; off > 0; off >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, off);
    q += __shfl_xor_sync(0xffffffffu, q, off);
  }
  const double m = s * inv_c;
  const double var = fmax(q * inv_c - m * m, 0.0);
  return make_float2(static_cast<float>(m), rsqrtf(static_cast<float>(var + static_cast<double>(eps))));
}
// The same from this lane's E values v of the row (C values over W lanes): the lane's sums in
// double, pairwise for E = 4 (sums of floats in double: exact but for exponents ~29 apart).
template <int W, int E>
__device__ __forceinline__ float2 row_stats(const float (&v)[E], int C, float eps) {
  double dv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) dv[e] = v[e];
  double s, q;
  if constexpr (E == 4) {
    s = (dv[0] + dv[1]) + (dv[2] + dv[3]);
    q = fma(dv[0], dv[0], dv[1] * dv[1]) + fma(dv[2], dv[2], dv[3] * dv[3]);
  } else {
    s = 0.0;
    q = 0.0;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      s += dv[e];
      q = fma(dv[e], dv[e], q);
    }
  }
  return row_stats_one_pass<W>(s, q, 1.0 / static_cast<double>(C), eps);
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
    if constexpr (KC > 0) {
      constexpr int E = KC / 16;
      float v[E];
#pragma unroll
      for (int e = 0; e < E; ++e) v[e] = xr[sub + 16 * e];
      const float2 st = row_stats<16, E>(v, KC, eps);  // (mean, 1/sigma)
      if (r < r1) {
#pragma unroll
        for (int e = 0; e < E; ++e) out[r * ld + sub + 16 * e] = (v[e] - st.x) * st.y * w[sub + 16 * e] + b[sub + 16 * e];
      }
    } else {
      double s = 0.0, q = 0.0;
#pragma unroll
      for (int c = sub; c < C; c += 16) {
        const double dv = xr[c];
        s += dv;
        q = fma(dv, dv, q);
      }
      const float2 st = row_stats_one_pass<16>(s, q, 1.0 / static_cast<double>(C), eps);  // (mean, 1/sigma)
      if (r < r1) {
#pragma unroll
        for (int c = sub; c < C; c += 16) out[r * ld + c] = (xr[c] - st.x) * st.y * w[c] + b[c];
      }
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

// Group g of this CTA's image: where it starts in shared memory (= in the image) and its floats.
__device__ __forceinline__ int group_offset(const MegaLayout& S, int L, int g) { return g < L ? g * S.layer : S.head; }
__device__ __forceinline__ int group_floats(const MegaLayout& S, int L, int g) {
  return g < L ? S.layer : S.x - S.head;
}
// One thread: group g's bulk copy from this CTA's image `img` put in flight, completing on its
// mbarrier bars[g] (initialised and fenced before; wait_group).
__device__ __forceinline__ void issue_weight_copy(float* sm, uint64_t* bars, const MegaLayout& S, int L, const float* img,
                                                  int g) {
  const int off = group_offset(S, L, g);
  const unsigned bytes = static_cast<unsigned>(group_floats(S, L, g)) * sizeof(float);
  detail::mbarrier_arrive_expect_tx(&bars[g], bytes);
  detail::bulk_load(sm + off, img + off, bytes, &bars[g]);
}
// One thread: every group's mbarrier initialised (each with its fence) and its copy put in
// flight, layer 0's first and the head's last (the forward's start fences all its mbarriers once
// instead: gpt_mega.cu).
__device__ __forceinline__ void issue_weight_copies(float* sm, uint64_t* bars, const MegaLayout& S, int L, const float* img) {
  for (int g = 0; g <= L; ++g) {
    detail::mbarrier_init(&bars[g]);
    issue_weight_copy(sm, bars, S, L, img, g);
  }
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// dims with K's compile-time constants in place (they then fold into every offset and index).
template <class K>
__device__ __forceinline__ MegaDims fixed_dims(MegaDims d) {
  d.C = K::C > 0 ? K::C : d.C;
  d.H = K::H > 0 ? K::H : d.H;
  d.F = K::F > 0 ? K::F : d.F;
  return d;
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

// Elements [e, e + 4) of a row's embedding: token `id`'s row of wte plus position ps's row of wpe;
// an id outside [0, V) gives NaNs (the host checks ids first; a kernel never reads out of bounds).
// gpt_mega.cu's forward (its overlapped start and the generic embedding) and gpt_mega_rows.cu use it.
__device__ __forceinline__ float4 embed4(const MegaParams& p, int id, int ps, int e, int C, int V) {
  const float4 pe = __ldg(reinterpret_cast<const float4*>(p.wpe + static_cast<int64_t>(ps) * C + e));
  if (id < 0 || id >= V) return make_float4(CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F);
  return add4(__ldg(reinterpret_cast<const float4*>(p.wte + static_cast<int64_t>(id) * C + e)), pe);
}

// Raises the kernel's limits to what (R, smem) need; false if the device cannot. The shared
// memory limit is always set to the device's maximum: a graph captured with a larger launch
// must stay valid after a smaller shape is prepared.
template <class Kernel>
bool prepare_kernel(Kernel kernel, int R, size_t smem) {
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
}  // namespace minigpt::cuda
