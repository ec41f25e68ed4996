// gpt_mega_rows.h's row-split forward: the weight image and its pack kernel, the kernel (one
// cluster per sequence, CTA r owning rows [r rp, r rp + rp)), its stage timestamps, and the host
// side. The shared helpers (LayerNorm rows, GELU, the warp softmax, bulk copies, st.async
// hand-overs, the embedding) are gpt_mega_parts.cuh's.
#include "kernels/cuda/gpt_mega_rows.h"

#include "kernels/cuda/gpt_mega_parts.cuh"

#include <cstring>

namespace minigpt::cuda {
namespace {

// ---- the shipped architecture, and the ring's pieces ----
constexpr int kC = 64, kH = 4, kF = 256, kDh = kC / kH;
constexpr int kLd = kC + 4;           // a row of k = 64 (weights and activations): 8 rows, 8 bank groups
constexpr int kLdH = kF + 4;          // h's rows
constexpr int kPieceRows = 64;        // weight rows (output columns) of a k = 64 piece
constexpr int kFc2Rows = 16;          // fc2 rows per piece
constexpr int kFc2Ld = 4 * kLd;       // an fc2 row: 4 slices of 64 k, each padded to 68
constexpr int kSlot = kPieceRows * kLd;  // floats of a ring slot = of every layer piece
static_assert(kFc2Rows * kFc2Ld == kSlot, "fc2's pieces fill a slot");
constexpr int kPiecesPerLayer = 12;   // q, k, v, proj, fc1 x 4, fc2 x 4 (in consumption order)
constexpr int kPieceProj = 3, kPieceFc1 = 4, kPieceFc2 = 8;
constexpr int kMaxSlots = 12;
constexpr int kSmemBudget = 232448;   // bytes: Hopper's opt-in shared memory per block (227 KB)
// The small vectors of a layer (floats from the layer's base), then the head's.
constexpr int kLn1w = 0, kLn1b = 64, kQkvb = 128, kProjb = 320, kLn2w = 384, kLn2b = 448, kFc1b = 512, kFc2b = 768;
constexpr int kSmallLayer = 832;
constexpr int kLnfw = 0, kLnfb = 64, kLmb = 128;
// mbarriers: the ring's slots [0, kMaxSlots), then the small vectors' copy, then k, v
constexpr int kBarSmall = kMaxSlots, kBarKv = kMaxSlots + 1, kBars = kMaxSlots + 2;

bool rows_arch(const MegaDims& d) {
  return d.C == kC && d.H == kH && d.F == kF && d.L >= 1 && d.L <= kMegaMaxLayers && d.V >= 1;
}

// How the k, v rows are handed over (MINIGPT_MEGA_ROWS_KV=barrier selects the second, to measure
// one against the other):
//   point to point (default): st.async to the later CTAs, each waiting on its mbarrier for the
//     bytes of the earlier CTAs only; a cluster barrier arrived after attention and waited on
//     before the next layer's pushes (off the critical path) guards the one k, v buffer;
//   barrier: plain remote stores, then a whole-cluster barrier (release / acquire) before
//     attention; the k, v buffers alternate by layer (a fast CTA's next layer must not overwrite
//     the keys a slow one still reads), no barrier after attention.
bool kv_by_barrier() {
  static const bool barrier = [] {
    const char* v = std::getenv("MINIGPT_MEGA_ROWS_KV");
    return v && std::strcmp(v, "barrier") == 0;
  }();
  return barrier;
}

// Offsets (floats) of a CTA's shared memory (host and device): the small vectors first (as the
// image holds them), the activations, the mbarriers, then the ring (ns slots: as many as fit,
// at most kMaxSlots). kv2: the k, v buffers twice (by layer parity).
struct RowsLayout {
  int rp, R, lm_pieces, pieces, small, ldv, x, ln, q, ks, vs, kv_stride, att, h, sc, lg, bars, ring, ns, total;
  __host__ __device__ RowsLayout(const MegaDims& d, int rows, bool kv2) {
    rp = rows;
    R = ceil_div(d.T, rp);
    lm_pieces = ceil_div(d.V, kPieceRows);
    pieces = d.L * kPiecesPerLayer + lm_pieces;
    ldv = round4(d.V);
    int o = 0;
    auto take = [&o](int n) { const int at = o; o += round4(n); return at; };
    small = d.L * kSmallLayer + 2 * kC + ldv;  // the image's first floats, copied as one
    take(small);
    x = take(rp * kLd);
    ln = take(rp * kLd);
    q = take(rp * kLd);
    kv_stride = kv2 ? d.T * kLd : 0;  // layer l's k, v at ks + (l & 1) kv_stride
    ks = take((kv2 ? 2 : 1) * d.T * kLd);  // every row's k, v of the sequence (the later ones unused)
    vs = take((kv2 ? 2 : 1) * d.T * kLd);
    att = take(rp * kLd);
    h = take(rp * kLdH);
    sc = take(rp * kH * (d.T + 1));  // a (row, head) item's scores
    lg = take(rp * ldv);
    bars = take(2 * kBars);
    ring = o;
    const int fit = (kSmemBudget / 4 - o) / kSlot;
    ns = fit < kMaxSlots ? fit : kMaxSlots;
    total = o + (ns > 0 ? ns : 0) * kSlot;
  }
  // Whether the ring can stream the model: every stage's pieces in the ring at once (qkv 3,
  // fc1 and fc2 4, lm_head all of its pieces)
  __host__ __device__ bool fits() const { return ns >= 4 && lm_pieces <= ns; }
};

// Piece i of the stream: where it starts in the image, and its bytes (every piece at i kSlot
// after the small vectors; lm_head's last one may be shorter).
__host__ __device__ inline int64_t piece_offset(const RowsLayout& S, int i) {
  return round4(S.small) + static_cast<int64_t>(i) * kSlot;
}
__host__ __device__ inline unsigned piece_bytes(const RowsLayout& S, int L, int V, int i) {
  const int j = i - L * kPiecesPerLayer;
  if (j < 0) return kSlot * 4u;
  const int rows = V - j * kPieceRows < kPieceRows ? V - j * kPieceRows : kPieceRows;
  return static_cast<unsigned>(rows * kLd) * 4u;
}

// ---- the image: pack ----

// Block 0: the small vectors; block 1 + i: piece i (the image is zeroed first: padding defined).
__global__ void gpt_mega_rows_pack_kernel(const __grid_constant__ MegaParams p, float* image) {
  const MegaDims& d = p.dims;
  const RowsLayout S(d, 1, false);
  auto vec = [&](float* dst, const float* src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  };
  // rows of k = 64 from W (row stride kC) into a piece (row stride kLd)
  auto rows64 = [&](float* dst, const float* W, int rows) {
    for (int i = threadIdx.x; i < rows * kC; i += blockDim.x) dst[(i / kC) * kLd + i % kC] = W[i];
  };
  if (blockIdx.x == 0) {
    for (int l = 0; l < d.L; ++l) {
      const MegaLayer& w = p.layers[l];
      float* s = image + l * kSmallLayer;
      vec(s + kLn1w, w.ln1_weight, kC);
      vec(s + kLn1b, w.ln1_bias, kC);
      vec(s + kQkvb, w.qkv_bias, 3 * kC);
      vec(s + kProjb, w.proj_bias, kC);
      vec(s + kLn2w, w.ln2_weight, kC);
      vec(s + kLn2b, w.ln2_bias, kC);
      vec(s + kFc1b, w.fc1_bias, kF);
      vec(s + kFc2b, w.fc2_bias, kC);
    }
    float* hd = image + d.L * kSmallLayer;
    vec(hd + kLnfw, p.ln_f_weight, kC);
    vec(hd + kLnfb, p.ln_f_bias, kC);
    vec(hd + kLmb, p.lm_head_bias, d.V);
    return;
  }
  const int i = static_cast<int>(blockIdx.x) - 1, l = i / kPiecesPerLayer, j = i % kPiecesPerLayer;
  float* dst = image + piece_offset(S, i);
  if (l >= d.L) {  // lm_head rows [64 jl, 64 jl + 64)
    const int jl = i - d.L * kPiecesPerLayer, n0 = jl * kPieceRows;
    rows64(dst, p.lm_head_weight + static_cast<int64_t>(n0) * kC, min(kPieceRows, d.V - n0));
    return;
  }
  const MegaLayer& w = p.layers[l];
  if (j < kPieceProj) {
    rows64(dst, w.qkv_weight + j * kPieceRows * kC, kPieceRows);
  } else if (j == kPieceProj) {
    rows64(dst, w.proj_weight, kPieceRows);
  } else if (j < kPieceFc2) {
    rows64(dst, w.fc1_weight + (j - kPieceFc1) * kPieceRows * kC, kPieceRows);
  } else {  // fc2 rows [16 jf, 16 jf + 16), k = 256 as 4 slices of 64, each padded to 68
    const float* W = w.fc2_weight + (j - kPieceFc2) * kFc2Rows * kF;
    for (int e = threadIdx.x; e < kFc2Rows * kF; e += blockDim.x) {
      const int n = e / kF, k = e % kF;
      dst[n * kFc2Ld + (k / kC) * kLd + k % kC] = W[e];
    }
  }
}

// ---- the ring of weight pieces ----
struct Ring {
  float* slots;
  uint64_t* bars;
  const float* img;
  const RowsLayout& S;
  int L, V;
  // Piece i's slot once it has landed (the calling thread waits).
  __device__ __forceinline__ const float* wait(int i) const {
    detail::mbarrier_wait(&bars[i % S.ns], static_cast<unsigned>((i / S.ns) & 1));
    return slots + (i % S.ns) * kSlot;
  }
  // One thread: piece i's bulk copy into its slot (nothing past the last piece).
  __device__ __forceinline__ void issue(int i) const {
    if (i >= S.pieces) return;
    uint64_t* bar = &bars[i % S.ns];
    const unsigned bytes = piece_bytes(S, L, V, i);
    detail::mbarrier_arrive_expect_tx(bar, bytes);
    detail::bulk_load(slots + (i % S.ns) * kSlot, img + piece_offset(S, i), bytes, bar);
  }
  // Thread 0, after the CTA barrier that ends the reads of pieces [a, b): their slots take the
  // pieces ns later.
  __device__ __forceinline__ void refill(int a, int b) const {
    if (threadIdx.x == 0)
      for (int i = a; i < b; ++i) issue(i + S.ns);
  }
};

// acc[i] = sum over k in [0, K) of a[i][k] * w[k], k in order from 0, for the RP rows of a
// (row stride lda; every lane of a warp reads the same a: a broadcast) and one weight row w.
template <int RP, int K>
__device__ __forceinline__ void dot_rows(const float* a, int lda, const float* w, float (&acc)[RP]) {
#pragma unroll
  for (int i = 0; i < RP; ++i) acc[i] = 0.0f;
#pragma unroll 4
  for (int k = 0; k < K; k += 4) {
    const float4 wv = *reinterpret_cast<const float4*>(w + k);
#pragma unroll
    for (int i = 0; i < RP; ++i) {
      const float4 av = *reinterpret_cast<const float4*>(a + i * lda + k);
      acc[i] = fmaf(av.x, wv.x, acc[i]);
      acc[i] = fmaf(av.y, wv.y, acc[i]);
      acc[i] = fmaf(av.z, wv.z, acc[i]);
      acc[i] = fmaf(av.w, wv.w, acc[i]);
    }
  }
}

// ---- diagnostics: stage timestamps (MINIGPT_MEGA_TRACE=1 selects the kTrace instance). The
// last CTA of cluster 0 (it waits for every other CTA's keys) stamps clock64 at each stage's end;
// launch kRowsTraceEvery / 2 of every kRowsTraceEvery prints the cycles per stage. ----
constexpr int kRowsTraceSlots = 2 + 8 * kMegaMaxLayers + 3;
constexpr unsigned kRowsTraceEvery = 400;
__device__ long long g_rows_trace[kRowsTraceSlots];
__device__ unsigned g_rows_trace_launches;

template <bool kTrace>
struct Stamps {
  bool on;  // this CTA's thread 0 stamps
  long long t0_ns = 0;
  __device__ __forceinline__ void operator()(int slot) const {
    if constexpr (kTrace) {
      if (on) g_rows_trace[slot] = clock64();
    }
  }
  __device__ void report(int L, int R, int rp) const {
    if constexpr (kTrace) {
      if (!on) return;
      long long ns;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
      const long long end = clock64();
      if (atomicAdd(&g_rows_trace_launches, 1u) % kRowsTraceEvery != kRowsTraceEvery / 2) return;
      const long long* t = g_rows_trace;
      printf("TRACE rows rp=%d R=%d (CTA %d) wall=%lld ns cycles=%lld | start %lld\n", rp, R, R - 1, ns - t0_ns,
             end - t[0], t[1] - t[0]);
      for (int l = 0; l < L; ++l) {
        const long long* u = t + 2 + 8 * l;
        printf("TRACE  layer %d: ln1 %lld qkv+push %lld wait kv %lld attn %lld proj %lld ln2 %lld fc1 %lld fc2 %lld\n", l,
               u[0] - u[-1], u[1] - u[0], u[2] - u[1], u[3] - u[2], u[4] - u[3], u[5] - u[4],
               u[6] - u[5], u[7] - u[6]);
      }
      const long long* h = t + 2 + 8 * L;
      printf("TRACE  head: lnf %lld lm_head %lld softmax+stores %lld\n", h[0] - h[-1], h[1] - h[0], end - h[1]);
    }
  }
};

// ---- the kernel ----
// RP rows per CTA (compile time: the accumulators are registers); the cluster (R CTAs) is one
// sequence, blockIdx.x / R.
template <int RP, bool kTrace, bool kBarrierKv>
__global__ void __launch_bounds__(kThreads, 1) gpt_mega_rows_kernel(const __grid_constant__ MegaParams p) {
  extern __shared__ __align__(16) float sm[];
  const MegaDims& d = p.dims;
  const RowsLayout S(d, RP, kBarrierKv);
  const int T = d.T, V = d.V, R = S.R, L = d.L;
  const int r = static_cast<int>(cluster_ctarank()), b = static_cast<int>(blockIdx.x) / R;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int t0 = r * RP, nr = min(RP, T - t0);
  const int64_t row0 = static_cast<int64_t>(b) * T + t0;  // global row of this CTA's first row
  float *x = sm + S.x, *ln = sm + S.ln, *qs = sm + S.q, *att = sm + S.att;
  float *h = sm + S.h, *lg = sm + S.lg;
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + S.bars);
  const Ring ring{sm + S.ring, bars, p.image, S, L, V};
  Stamps<kTrace> stamp{b == 0 && r == R - 1 && tid == 0};
  if constexpr (kTrace) {
    if (stamp.on) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(stamp.t0_ns));
  }
  stamp(0);

  // start: thread 0 initialises every mbarrier behind one fence and puts the small vectors'
  // copy and the first ns pieces in flight; warps 1.. embed this CTA's rows meanwhile
  if (tid == 0) {
    for (int i = 0; i < kBars; ++i) detail::mbarrier_init_unfenced(&bars[i]);
    detail::fence_mbarrier_init();
    detail::mbarrier_arrive_expect_tx(&bars[kBarSmall], S.small * 4u);
    detail::bulk_load(sm, p.image, S.small * 4u, &bars[kBarSmall]);
    for (int i = 0; i < S.ns; ++i) ring.issue(i);
  } else if (tid >= 32) {
    for (int f = tid - 32; f < nr * (kC / 4); f += kThreads - 32) {
      const int m = f / (kC / 4), e = (f % (kC / 4)) * 4;
      const int id = p.ids ? p.ids[row0 + m] : p.id;
      *reinterpret_cast<float4*>(x + m * kLd + e) = embed4(p, id, t0 + m, e, kC, V);
    }
  }
  __syncthreads();  // the mbarriers are initialised, x is in
  cluster_arrive_relaxed();  // waited on before the first k, v push: this CTA's mbarriers exist
  detail::mbarrier_wait(&bars[kBarSmall], 0);
  stamp(1);

  const float scale = 1.0f / sqrtf(static_cast<float>(kDh));
  float acc[RP];
  for (int l = 0; l < L; ++l) {
    const float* sw = sm + l * kSmallLayer;
    const int pi = l * kPiecesPerLayer;
    float* ks = sm + S.ks + (l & 1) * S.kv_stride;
    float* vs = sm + S.vs + (l & 1) * S.kv_stride;
    layernorm_rows<kC>(x, ln, 0, nr, kC, kLd, sw + kLn1w, sw + kLn1b, p.eps);
    __syncthreads();
    stamp(2 + 8 * l);

    // q, k, v: a thread per output column (q 0..63, k 64..127, v 128..191) for all rows
    const bool qkv_thread = tid < 3 * kC;
    if (qkv_thread) dot_rows<RP, kC>(ln, kLd, ring.wait(pi + tid / kPieceRows) + (tid % kPieceRows) * kLd, acc);
    // every CTA has read the previous layer's k, v (layer 0: every CTA runs); by barrier: the
    // barrier of the previous layer's hand-over did that
    if (!kBarrierKv || l == 0) cluster_wait();
    if (qkv_thread) {
      const int part = tid / kC, c = tid % kC;
      const float bias = sw[kQkvb + tid];
#pragma unroll
      for (int i = 0; i < RP; ++i) {
        if (i >= nr) break;
        const float v = acc[i] + bias;
        if (part == 0) {
          qs[i * kLd + c] = v;
        } else {  // to this CTA and every later one (their rows attend to it)
          float* dst = (part == 1 ? ks : vs) + (t0 + i) * kLd + c;
          *dst = v;
          for (int q = r + 1; q < R; ++q) {
            if constexpr (kBarrierKv)
              store_remote1(dst, v, static_cast<unsigned>(q));
            else
              st_async1(shared_addr_in(dst, q), v, shared_addr_in(&bars[kBarKv], q));
          }
        }
      }
    }
    stamp(3 + 8 * l);
    // the earlier CTAs' rows: t0 rows of k and v
    if constexpr (kBarrierKv) {
      cluster_arrive();  // release: this thread's stores, local and remote
      cluster_wait();    // (every thread of this CTA has read q, k, v's pieces too)
      ring.refill(pi, pi + kPieceProj);
    } else {
      __syncthreads();
      if (tid == 0) {
        stage_arrive(&bars[kBarKv], static_cast<unsigned>(t0 * 2 * kC) * 4u);
        ring.refill(pi, pi + kPieceProj);
      }
      stage_wait(&bars[kBarKv], static_cast<unsigned>(l & 1));
    }
    stamp(4 + 8 * l);

    // attention: a warp per (own row i, head hh), keys 0..t
    for (int item = warp; item < nr * kH; item += kWarps) {
      const int i = item / kH, hh = item % kH, n = t0 + i + 1;
      float* row = sm + S.sc + item * (T + 1);
      const float* qt = qs + i * kLd + hh * kDh;
      for (int k = lane; k < n; k += 32) row[k] = dot_qk(qt, ks + k * kLd + hh * kDh, kDh) * scale;
      __syncwarp();
      warp_softmax_inplace(row, n);
      __syncwarp();
      if (lane < kDh / 4) {  // att (4 of the head's columns) = probabilities times v, in key order
        const int e = hh * kDh + lane * 4;
        float4 a = {0.f, 0.f, 0.f, 0.f};
        for (int k = 0; k < n; ++k) {
          const float pr = row[k];
          const float4 vv = *reinterpret_cast<const float4*>(vs + k * kLd + e);
          a.x = fmaf(pr, vv.x, a.x);
          a.y = fmaf(pr, vv.y, a.y);
          a.z = fmaf(pr, vv.z, a.z);
          a.w = fmaf(pr, vv.w, a.w);
        }
        *reinterpret_cast<float4*>(att + i * kLd + e) = a;
      }
    }
    __syncthreads();
    if (!kBarrierKv && l + 1 < L) cluster_arrive_relaxed();  // this CTA's k, v are read: the next layer's may come
    stamp(5 + 8 * l);

    // proj + residual: a thread per output column, x = (att proj^T + b) + x
    if (tid < kC) {
      dot_rows<RP, kC>(att, kLd, ring.wait(pi + kPieceProj) + tid * kLd, acc);
      const float bias = sw[kProjb + tid];
#pragma unroll
      for (int i = 0; i < RP; ++i)
        if (i < nr) x[i * kLd + tid] = (acc[i] + bias) + x[i * kLd + tid];
    }
    __syncthreads();
    ring.refill(pi + kPieceProj, pi + kPieceFc1);
    stamp(6 + 8 * l);

    layernorm_rows<kC>(x, ln, 0, nr, kC, kLd, sw + kLn2w, sw + kLn2b, p.eps);
    __syncthreads();
    stamp(7 + 8 * l);

    // fc1 + GELU: a thread per output column
    if (tid < kF) {
      dot_rows<RP, kC>(ln, kLd, ring.wait(pi + kPieceFc1 + tid / kPieceRows) + (tid % kPieceRows) * kLd, acc);
      const float bias = sw[kFc1b + tid];
#pragma unroll
      for (int i = 0; i < RP; ++i)
        if (i < nr) h[i * kLdH + tid] = gelu_erf(acc[i] + bias);
    }
    __syncthreads();
    ring.refill(pi + kPieceFc1, pi + kPieceFc2);
    stamp(8 + 8 * l);

    // fc2 + residual: 4 lanes per output column n, lane s adding k in [64 s, 64 s + 64) in
    // order; lane 0 adds the slices' sums in slice order, then b, then x
    if (tid < 4 * kC) {
      const int n = tid >> 2, s = tid & 3;
      dot_rows<RP, kC>(h + s * kC, kLdH,
                       ring.wait(pi + kPieceFc2 + n / kFc2Rows) + (n % kFc2Rows) * kFc2Ld + s * kLd, acc);
      const float bias = sw[kFc2b + n];
#pragma unroll
      for (int i = 0; i < RP; ++i) {
        const float p1 = __shfl_down_sync(0xffffffffu, acc[i], 1), p2 = __shfl_down_sync(0xffffffffu, acc[i], 2),
                    p3 = __shfl_down_sync(0xffffffffu, acc[i], 3);
        if (s == 0 && i < nr) x[i * kLd + n] = ((((acc[i] + p1) + p2) + p3) + bias) + x[i * kLd + n];
      }
    }
    __syncthreads();
    ring.refill(pi + kPieceFc2, pi + kPiecesPerLayer);
    stamp(9 + 8 * l);
  }

  // head: ln_f, lm_head (a thread per vocabulary column), softmax a warp per row
  const float* hd = sm + L * kSmallLayer;
  layernorm_rows<kC>(x, ln, 0, nr, kC, kLd, hd + kLnfw, hd + kLnfb, p.eps);
  __syncthreads();
  stamp(2 + 8 * L);
  const int pl = L * kPiecesPerLayer;
  for (int n = tid; n < V; n += kThreads) {
    dot_rows<RP, kC>(ln, kLd, ring.wait(pl + n / kPieceRows) + (n % kPieceRows) * kLd, acc);
    const float bias = hd[kLmb + n];
#pragma unroll
    for (int i = 0; i < RP; ++i)
      if (i < nr) lg[i * S.ldv + n] = acc[i] + bias;
  }
  __syncthreads();
  stamp(3 + 8 * L);
  // the row's max, then exp(l - max) kept in place of the logit (stored first) and summed, then
  // probs = exp * (1 / sum); a NaN logit makes the sum, so the row, NaN
  for (int i = warp; i < nr; i += kWarps) {
    float* row = lg + i * S.ldv;
    float* lo = p.logits + (row0 + i) * V;
    float mx = -CUDART_INF_F;
    for (int j = lane; j < V; j += 32) mx = fmaxf(mx, row[j]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (!p.probs) {
      for (int j = lane; j < V; j += 32) lo[j] = row[j];
      continue;
    }
    float sum = 0.0f;
    for (int j = lane; j < V; j += 32) {
      const float v = row[j], e = expf(v - mx);
      lo[j] = v;
      row[j] = e;
      sum += e;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = 1.0f / sum;
    float* pr = p.probs + (row0 + i) * V;
    for (int j = lane; j < V; j += 32) pr[j] = row[j] * inv;
  }
  stamp.report(L, R, RP);
}

using RowsKernel = void (*)(MegaParams);

template <bool kTrace, bool kBarrierKv>
RowsKernel rows_kernel_rp(int rp) {
  switch (rp) {
    case 1: return gpt_mega_rows_kernel<1, kTrace, kBarrierKv>;
    case 2: return gpt_mega_rows_kernel<2, kTrace, kBarrierKv>;
    case 4: return gpt_mega_rows_kernel<4, kTrace, kBarrierKv>;
    default: return nullptr;
  }
}
RowsKernel rows_kernel_for(int rp) {
  static const bool trace = std::getenv("MINIGPT_MEGA_TRACE") != nullptr;  // diagnostics, read once
  if (kv_by_barrier()) return trace ? rows_kernel_rp<true, true>(rp) : rows_kernel_rp<false, true>(rp);
  return trace ? rows_kernel_rp<true, false>(rp) : rows_kernel_rp<false, false>(rp);
}

// Whether the kernel takes dims at rp rows per CTA (shape only; residency is the device's).
bool rows_takes(const MegaDims& d, int rp) {
  if (!rows_kernel_for(rp) || !rows_arch(d) || d.cache || d.split_k || d.B < 1 || d.T < 1 || d.T > d.P ||
      d.capacity != d.T)
    return false;
  const RowsLayout S(d, rp, kv_by_barrier());
  return S.R <= 16 && S.fits() && static_cast<int64_t>(d.B) * S.R <= 65535;
}

}  // namespace

size_t gpt_mega_rows_smem(const MegaDims& d, int rp) {
  if (!rows_takes(d, rp)) return 0;
  return static_cast<size_t>(RowsLayout(d, rp, kv_by_barrier()).total) * sizeof(float);
}

int gpt_mega_rows_cluster(const MegaDims& d, int rp) {
  const size_t smem = gpt_mega_rows_smem(d, rp);
  if (smem == 0) return 0;
  const int R = ceil_div(d.T, rp);
  if (!prepare_kernel(rows_kernel_for(rp), R, smem)) return 0;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(R, smem, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, rows_kernel_for(rp), &cfg) != cudaSuccess || clusters < 1) {
    cudaGetLastError();
    return 0;
  }
  return R;
}

size_t gpt_mega_rows_image_floats(const MegaDims& d) {
  if (!rows_arch(d)) return 0;
  const RowsLayout S(d, 1, false);
  return static_cast<size_t>(piece_offset(S, S.pieces));
}

void gpt_mega_rows_pack(const MegaParams& p, float* image, cudaStream_t stream) {
  const size_t floats = gpt_mega_rows_image_floats(p.dims);
  MINIGPT_CUDA_REQUIRE(floats > 0 && image, "gpt_mega_rows_pack: the architecture (C=", p.dims.C, ", H=", p.dims.H,
                       ", F=", p.dims.F, ") is not the one it takes (C 64, H 4, F 256), or the image is null");
  MINIGPT_CUDA_CHECK(cudaMemsetAsync(image, 0, floats * sizeof(float), stream));
  gpt_mega_rows_pack_kernel<<<1 + RowsLayout(p.dims, 1, false).pieces, 256, 0, stream>>>(p, image);
  MINIGPT_CUDA_CHECK(cudaGetLastError());
}

void gpt_mega_rows(const MegaParams& p, int rp, cudaStream_t stream) {
  const MegaDims& d = p.dims;
  const size_t smem = gpt_mega_rows_smem(d, rp);
  MINIGPT_CUDA_REQUIRE(smem > 0, "gpt_mega_rows: the forward (B=", d.B, ", T=", d.T, ", C=", d.C, ", H=", d.H, ", F=", d.F,
                       ", V=", d.V, ") is not taken at ", rp, " rows per CTA (C 64, H 4, F 256; rp 1, 2 or 4; at most 16 CTAs per sequence)");
  MINIGPT_CUDA_REQUIRE(p.image && (reinterpret_cast<uintptr_t>(p.image) & 15u) == 0,
                       "gpt_mega_rows: no weight image (gpt_mega_rows_pack), or one not 16-byte aligned");
  MINIGPT_CUDA_REQUIRE(p.ids && p.wte && p.wpe && p.logits, "gpt_mega_rows: null pointer");
  const int R = ceil_div(d.T, rp);
  MINIGPT_CUDA_REQUIRE(prepare_kernel(rows_kernel_for(rp), R, smem), "gpt_mega_rows: ", smem,
                       " bytes of shared memory at cluster size ", R, " do not fit the device");
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = launch_config(R, smem, stream, attr);
  cfg.gridDim = dim3(static_cast<unsigned>(d.B * R));  // a cluster per sequence
  MINIGPT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, rows_kernel_for(rp), p));
}

}  // namespace minigpt::cuda
