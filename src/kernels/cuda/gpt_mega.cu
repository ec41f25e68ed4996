// gpt_mega.h's megakernel for the forward and the KV-cache decode step (gpt_mega_kernel), the
// kernel that packs the weight image (gpt_mega_pack), the stage timestamps the figures in
// gpt_mega.h come from, and the host side of both. The shared-memory layout and the arithmetic
// it shares with the device decode loop (gpt_mega_generate.cu) are in gpt_mega_parts.cuh.
#include "kernels/cuda/gpt_mega_parts.cuh"

#include <cstdio>
#include <cstdlib>

namespace minigpt::cuda {
namespace {

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

// rows x cols = a W^T over k in [k0, k1), k in order (dot4), a thread per (row m, 4 columns j0..j0+3),
// rows fastest over the lanes (see gemm_stage): finish(m, j0, acc) gets the 4 sums (no bias).
template <class Finish>
__device__ __forceinline__ void gemm4(const float* a, int lda, int rows, const float* w, int ldw, int k0, int k1, int cols,
                                      Finish finish) {
  for (int u = threadIdx.x; u < rows * (cols / 4); u += kThreads) {
    const int m = u % rows, j0 = (u / rows) * 4;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    dot4(a + m * lda, w + j0 * ldw, ldw, k0, k1, acc);
    finish(m, j0, static_cast<const float*>(acc));
  }
}

// Stage A of layer l: every (sequence b, head hh) item of this CTA (items r, r + R, ...; all of
// head r % H): ln1 of b's rows, the head's q, k, v, causal attention; att pushed to every CTA,
// or (head_proj) kept here and its part of proj, att_h proj.weight[:, head's columns]^T for every
// output column, pushed to every CTA's pp[hh] instead (Net<true>: each 4 columns to the CTA
// owning them only, a quarter of att's bytes at R = 16). The attention proper runs a warp per query
// row: its scores (a lane per key), their softmax and its att columns, with no CTA barrier
// between them (the row's values are the warp's own; T = 16: all 16 warps busy).
template <class K, bool kSplit, bool kTrace, bool kP2P>
__device__ __forceinline__ void attention_stage(const Ctx& c, int l, const Net<kP2P>& net) {
  const MegaDims& d = c.d;
  const MegaLayout& S = c.S;
  const int T = d.T, C = d.C, dh = S.dh, tid = threadIdx.x, R = S.R, pos0 = c.pos0;
  const int warp = tid >> 5, lane = tid & 31;
  const float* base = c.sm + l * S.layer;
  const MegaLayer& w = c.p.layers[l];
  float *x = c.sm + S.x, *ln = c.sm + S.ln, *att = c.sm + S.att, *qs = c.sm + S.q, *sc = c.sm + S.sc;
  float* ks = c.sm + S.kv + (d.cache ? l : 0) * 2 * S.kv_rows * S.sd;
  float* vs = ks + S.kv_rows * S.sd;
  const int ldsc = S.kv_rows + 1;
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
      gemm4(ln + row0 * S.sC, S.sC, T, base + S.qkv, S.sC, 0, C, 3 * dh, [&](int t, int j0, const float* acc) {
        store_qkv(t, j0, make_float4(acc[0] + base[S.qkvb + j0], acc[1] + base[S.qkvb + j0 + 1],
                                     acc[2] + base[S.qkvb + j0 + 2], acc[3] + base[S.qkvb + j0 + 3]));
      });
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
          net.all4(att + (row0 + t) * S.sC + hh * dh + e, a, kBarAtt);
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
      // (t, 4 output columns), k in order
      gemm4(att + row0 * S.sC + hh * dh, S.sC, T, base + S.proj, S.sd, 0, dh, C, [&](int t, int n0, const float* acc) {
        const float4 v = make_float4(acc[0], acc[1], acc[2], acc[3]);
        if constexpr (kP2P)  // to the CTA owning the columns only (pp: (H, N, pc))
          net.one4(pp + (hh * S.N + row0 + t) * S.pc + n0 % S.pc, v, static_cast<unsigned>(n0 / S.pc), kBarAtt);
        else
          push4(pp + (hh * S.N + row0 + t) * S.sC + n0, v, R);
      });
    }
    // q, k, v, scores are reused by the next item (Net<true>: only if there is one; the stage's
    // hand-over, Net::wait, starts with a CTA barrier)
    if (!kP2P || item + R < d.B * d.H) __syncthreads();
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
    gemm4(a, lda, N, w, ldw, 0, K, cols, [&](int m, int j0, const float* acc) {
      finish(m, j0, make_float4(acc[0] + bias[j0], acc[1] + bias[j0 + 1], acc[2] + bias[j0 + 2], acc[3] + bias[j0 + 3]));
    });
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


// The residual xout (N x C+4) = xin + y for this CTA's columns, pushed to every CTA (xout may
// be xin: in place).
template <bool kSplit, bool kP2P>
__device__ __forceinline__ void residual_stage(const Ctx& c, const float* a, int lda, int K, const float* w, int ldw,
                                               const float* bias, const float* xin, float* xout, const Net<kP2P>& net,
                                               int bar) {
  const int n0 = c.r * c.S.pc, sC = c.S.sC;
  gemm_stage<kSplit>(c, a, lda, K, w, ldw, bias, c.S.pc, [&](int m, int j0, float4 v) {
    const int at = m * sC + n0 + j0;
    net.all4(xout + at, add4(v, *reinterpret_cast<const float4*>(xin + at)), bar);  // (sum + b) + x, as the CPU
  });
}

// fc2 by k (MegaLayout::fc2k), first half: for each 16-k slice of this CTA's columns of h
// (f0 = r fc, written here by fc1) and each output (row m, 4 columns n0..n0+3), the slice's sum
// in k order from 0, pushed to the CTA owning those columns (n0 / pc) at p2[(slice, m, n0 % pc)].
// Rows run fastest over the lanes (one fc2.weight address per warp: a broadcast), as gemm_stage.
template <bool kP2P>
__device__ __forceinline__ void fc2_partials(const Ctx& c, const float* h, const float* w, const Net<kP2P>& net) {
  const MegaLayout& S = c.S;
  const int N = S.N, sl = S.fc / kFc2Slice, f0 = c.r * S.fc, ldw = S.fc + 4;
  float* p2 = c.sm + S.p2;
  for (int s = 0; s < sl; ++s) {
    float* dst = p2 + (f0 / kFc2Slice + s) * N * S.pc;
    gemm4(h + f0, S.sF, N, w, ldw, s * kFc2Slice, (s + 1) * kFc2Slice, c.d.C, [&](int m, int n0, const float* acc) {
      net.one4(dst + m * S.pc + n0 % S.pc, make_float4(acc[0], acc[1], acc[2], acc[3]), static_cast<unsigned>(n0 / S.pc),
               kBarP2);
    });
  }
}
// An owner's sum, once every CTA's partials are here: this CTA's pc columns of xout = xin +
// (the `count` partials of parts (count, N, pc) added in order) + b, pushed to every CTA: (sum +
// b) + x, as residual_stage. fc2 by k: the F/16 slices' partials (p2); proj by heads with Net<true>:
// the H heads' partials in head order (pp).
template <bool kP2P>
__device__ __forceinline__ void owner_sum_stage(const Ctx& c, const float* parts, int count, const float* bias,
                                                const float* xin, float* xout, const Net<kP2P>& net, int bar) {
  const MegaLayout& S = c.S;
  const int N = S.N, pc = S.pc, n0 = c.r * pc;
  for (int u = threadIdx.x; u < N * (pc / 4); u += kThreads) {
    const int m = u % N, j0 = (u / N) * 4;
    float4 v = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < count; ++s) v = add4(v, *reinterpret_cast<const float4*>(parts + (s * N + m) * pc + j0));
    const int at = m * S.sC + n0 + j0;
    const float4 y = make_float4(v.x + bias[j0], v.y + bias[j0 + 1], v.z + bias[j0 + 2], v.w + bias[j0 + 3]);
    net.all4(xout + at, add4(y, *reinterpret_cast<const float4*>(xin + at)), bar);
  }
}

// K: the model's C, H, F as compile-time constants (gpt_mega_kernel<Fixed<64, 4, 256>>, the
// shipped architecture: the layout's offsets and every index fold to constants, no run-time
// divisions by them) or Fixed<0, 0, 0>, the generic kernel reading them from p.dims. kSplit: the
// k-split sums (p.dims.split_k, the decode step) in their own instance: as a run-time branch in
// the one kernel they made the forward's code spill (ptxas: 32 bytes, at the 128 registers of
// 512 threads per CTA; none before or as a separate instance), and the forward measured ~1.3 us
// slower (H200, 63.0 -> 64.4 us). kP2P: the stages hand over point to point (Net<true>,
// mega_p2p: the forward of the shipped architecture); a forward's arithmetic is the same either way.
template <class K, bool kSplit, bool kTrace = false, bool kP2P = false>
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
  int* ids = reinterpret_cast<int*>(sm + S.ids);
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + S.bars);
  const Net<kP2P> net{reinterpret_cast<uint64_t*>(sm + S.nbars), R, r};
  const bool out_of_range = pos0 < 0 || pos0 + d.T > d.capacity || pos0 + d.T > d.P;
  float* x = sm + S.x;
  if constexpr (kP2P) {
    // the forward: every mbarrier (the weight groups', Net's) initialised behind ONE fence, then
    // the copies; meanwhile warps 1.. embed, each row's id loaded by the threads that use it (no
    // round trip through shared memory and a CTA barrier before the embedding's loads; warp 0 is
    // thread 0's, which issues the copies). Measured (H200, trace): start 6.0k -> 4.7k cycles.
    if (tid == 0) {
      for (int g = 0; g <= d.L; ++g) detail::mbarrier_init_unfenced(&bars[g]);
      for (int b = 0; b < kNetBars; ++b) detail::mbarrier_init_unfenced(net.bars + b);
      detail::fence_mbarrier_init();
      const float* img = p.image + static_cast<int64_t>(r) * S.x;
      for (int g = 0; g <= d.L; ++g) issue_weight_copy(sm, bars, S, d.L, img, g);
    } else if (tid >= 32 && !out_of_range) {
      constexpr int kE = kThreads - 32;  // embedding threads
      const int n4 = N * C / 4;          // float4s of x
      for (int f0 = tid - 32; f0 < n4; f0 += 2 * kE) {
        int id[2];
        float4 v[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int f = f0 + j * kE;
          id[j] = f < n4 ? (p.ids ? p.ids[f * 4 / C] : p.id) : 0;
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int f = f0 + j * kE, m = f * 4 / C, e = f * 4 % C;
          v[j] = f < n4 ? embed4(p, id[j], pos0 + m % d.T, e, C, d.V) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int f = f0 + j * kE;
          if (f < n4) *reinterpret_cast<float4*>(x + (f * 4 / C) * S.sC + f * 4 % C) = v[j];
        }
      }
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them; x is in
  } else {
    if (tid == 0) issue_weight_copies(sm, bars, S, d.L, p.image + static_cast<int64_t>(r) * S.x);
    // the ids after the copies are issued (thread 0 would wait for its id's load first)
    for (int m = tid; m < N; m += kThreads) ids[m] = p.ids ? p.ids[m] : p.id;
    __syncthreads();  // the barriers are initialised before anyone waits on them; ids are in
  }

  // 2. out of range: NaN outputs, and leave before any cluster barrier (once the copies have landed)
  if (out_of_range) {
    const int n0 = r * S.vc, vn = max(0, min(S.vc, d.V - n0));
    for (int i = tid; i < N * vn; i += kThreads) {
      const int64_t at = static_cast<int64_t>(i / vn) * d.V + n0 + i % vn;
      p.logits[at] = CUDART_NAN_F;
      if (p.probs) p.probs[at] = CUDART_NAN_F;
    }
    for (int g = 0; g <= d.L; ++g) wait_group(bars, g);
    return;
  }
  cluster_arrive_relaxed();  // waited on before the first push (attention_stage of layer 0): Net's mbarriers exist
  stamp<kTrace>(r, 1);

  // 3. the embedding of all N rows (a replica per CTA), and (decode) the earlier k, v rows of
  //    this CTA's head for every layer: loads first, then the stores (one round trip)
  for (int i0 = 0; i0 < (kP2P ? 0 : N * C); i0 += 16 * kThreads) {  // (Net<true>: embedded above)
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = i0 + (j * kThreads + tid) * 4;
      v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < N * C) {
        const int m = i / C;
        v[j] = embed4(p, ids[m], pos0 + m % d.T, i % C, C, d.V);
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

  // Net<true>: the bytes each stage brings from the other CTAs (the rest is this CTA's own share)
  const int items = r < d.B * d.H ? (d.B * d.H - 1 - r) / R + 1 : 0;
  // att (T x dh per item) to every CTA, or (head_proj) the items' proj partials (T x pc) to the owners
  const unsigned att_bytes = static_cast<unsigned>(d.head_proj ? (d.H * N - items * d.T) * S.pc
                                                                : N * C - items * d.T * S.dh) * 4u;
  const unsigned x_bytes = static_cast<unsigned>(N * (C - S.pc)) * 4u;
  const unsigned p2_bytes = static_cast<unsigned>((S.ns2 - S.fc / kFc2Slice) * N * S.pc) * 4u;
  float* xm = kP2P ? sm + S.x1 : x;  // the residual between proj and fc2 (x1, or x in place)
  for (int l = 0; l < d.L; ++l) {
    const unsigned parity = static_cast<unsigned>(l & 1);
    wait_group(bars, l);
    // the embedding's stores (layer 0); after Net::wait (every thread waited) none is needed
    if (!kP2P || l == 0) __syncthreads();
    stamp<kTrace>(r, trace_slot(l, 0));
    const float* base = sm + l * S.layer;
    attention_stage<K, kSplit, kTrace, kP2P>(c, l, net);
    stamp<kTrace>(r, trace_slot(l, 4));
    net.wait(kBarAtt, att_bytes, parity);
    if (kP2P && d.head_proj) {  // this CTA's columns of x1 = (the heads' partials in head order) + b + x
      owner_sum_stage(c, sm + S.pp, d.H, base + S.projb + r * S.pc, x, xm, net, kBarX1);
      net.wait(kBarX1, x_bytes, parity);
    } else if (d.head_proj) {  // x += (the heads' partials, summed in head order) + b, every CTA all of it
      const float* pp = sm + S.pp;
      for (int i = tid; i < N * C; i += kThreads) {
        const int m = i / C, n = i % C;
        float v = 0.0f;
        for (int hh = 0; hh < d.H; ++hh) v += pp[(hh * N + m) * S.sC + n];
        x[m * S.sC + n] = (v + base[S.projb + n]) + x[m * S.sC + n];
      }
      __syncthreads();
    } else {
      residual_stage<kSplit>(c, sm + S.att, S.sC, C, base + S.proj, S.sC, base + S.projb, x, xm, net, kBarX1);
      net.wait(kBarX1, x_bytes, parity);
    }
    stamp<kTrace>(r, trace_slot(l, 5));
    float* ln = sm + S.ln;
    float* h = sm + S.h;
    layernorm_rows<K::C>(xm, ln, 0, N, C, S.sC, base + S.ln2w, base + S.ln2b, p.eps);
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
        push4(h + m * S.sF + f0 + j0, g, R);  // (never with Net<true>: fc2 by k)
    });
    if (fc2k) {
      __syncthreads();
      fc2_partials(c, h, base + S.fc2, net);
    }
    stamp<kTrace>(r, trace_slot(l, 7));  // the trace's "fc1": with fc2 by k, fc1 + the partials
    net.wait(kBarP2, p2_bytes, parity);
    stamp<kTrace>(r, trace_slot(l, 8));
    if (fc2k)
      owner_sum_stage(c, sm + S.p2, S.ns2, base + S.fc2b, xm, x, net, kBarX);
    else
      residual_stage<kSplit>(c, h, S.sF, d.F, base + S.fc2, S.sF, base + S.fc2b, xm, x, net, kBarX);
    stamp<kTrace>(r, trace_slot(l, 9));
    net.wait(kBarX, x_bytes, parity);
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
    gemm4(ln, S.sC, N, hd + S.lm, S.sC, 0, C, groups * 4, [&](int m, int j0, const float* acc) {  // rows fastest
      store_logits(m, j0, make_float4(acc[0] + hd[S.lmb + j0], acc[1] + hd[S.lmb + j0 + 1], acc[2] + hd[S.lmb + j0 + 2],
                                      acc[3] + hd[S.lmb + j0 + 3]));
    });
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
    if (m < N && sub < R) net.one2(stats + (r * N + m) * 2, make_float2(mx, sum), sub, kBarStats);
  }
  stamp<kTrace>(r, 62);
  net.wait(kBarStats, static_cast<unsigned>((R - 1) * N) * 8u, 0u);
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

using MegaKernel = void (*)(MegaParams, int);

// The kernel for d: specialised for the shipped architecture (C 64, H 4, F 256), else generic.
// Both do the same arithmetic in the same order: the logits do not depend on which one runs.
MegaKernel kernel_for(const MegaDims& d) {
  static const bool trace = std::getenv("MINIGPT_MEGA_TRACE") != nullptr;  // diagnostics, read once
  using KF = Fixed<64, 4, 256>;
  if (d.C == 64 && d.H == 4 && d.F == 256) {
    if (d.split_k) return trace ? gpt_mega_kernel<KF, true, true> : gpt_mega_kernel<KF, true>;
    if (mega_p2p(d)) return trace ? gpt_mega_kernel<KF, false, true, true> : gpt_mega_kernel<KF, false, false, true>;
    return trace ? gpt_mega_kernel<KF, false, true> : gpt_mega_kernel<KF, false>;
  }
  return d.split_k ? gpt_mega_kernel<Fixed<0, 0, 0>, true> : gpt_mega_kernel<Fixed<0, 0, 0>, false>;
}

}  // namespace

bool gpt_mega_p2p(const MegaDims& d) { return mega_p2p(d); }

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

}  // namespace minigpt::cuda
