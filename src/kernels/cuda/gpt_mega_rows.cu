// gpt_mega_rows.h's row-split forward: the weight image and its pack kernel, the kernel (one
// cluster per sequence, CTA r owning rows [r rp, r rp + rp)), its stage timestamps, and the host
// side. The shared helpers (LayerNorm rows, GELU, the warp softmax, bulk copies, st.async
// hand-overs, the embedding) are gpt_mega_parts.cuh's.
#include "kernels/cuda/gpt_mega_rows.h"

#include "kernels/cuda/gpt_mega_parts.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

namespace minigpt::cuda {
namespace {

// ---- the shipped architecture, and the ring's pieces ----
constexpr int kC = 64, kH = 4, kF = 256, kDh = kC / kH;
constexpr int kLd = kC + 4;           // a row of k = 64 (weights and activations): 8 rows, 8 bank groups
constexpr int kLdH = 4 * (kC + 4);    // h's rows: 4 slices of 64 (fc2's k), each padded to 68
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
// Variants (issue 14's leads, MINIGPT_MEGA_ROWS_VARIANT; 1 row per CTA only, other rp run kVar
// 0: the ring's refills issued by warp 0, which starts the next stage). The default (lm1) is
// every bit below; bitw, the A/B baseline, all but the head's kVarLmOne and kVarLmStore. Bit
// kVarW15 (both; w15 was the variant of it alone), the refills issued by the last warp, idle in
// every GEMM stage.
// The variants measured and removed (lnfuse, multicast refills, lm_head split over the cluster,
// pair, pwsplit, pwkeys, lnpart, bwlp, the folded LayerNorms, soft1 / lm1s / lmqs, register
// blocking rb2 / rb4): each with its figures and why it lost in docs/MEGAKERNEL.md "rows" (and in
// gpt_mega_rows.h's summary); the bits below are the ones the default runs.
// kVarPrewait (in the default): the GEMM threads never wait on the ring's mbarriers. Lane j of
// the last warp (idle in the stage before every GEMM stage: the LayerNorms, attention, fc1) waits
// for the next stage's piece j BEFORE the CTA barrier that precedes that stage, so the barrier
// certifies the pieces landed and the stage reads its slots at once (Ring::prewait_at, Ring::at).
// Memory model (PTX ISA): try_wait returning true makes the phase's cp.async.bulk operations
// "performed and made visible to the executing thread" (mbarrier.try_wait), and a bulk copy's
// completion "is followed by an implicit generic-async proxy fence ... made visible to the
// generic proxy as soon as its completion is observed" (9.7.9.25.2, Async Proxy): once the waiter
// has observed it, the data are ordinary generic-proxy writes visible to it, and its bar.sync
// orders what it observed before the other participants' reads after the barrier. Needs ns >=
// kPrewaitSlots (fc2's last piece is issued after proj's refill). Only with kVarSlots (the one
// implementation of the waits: Ring::prewait_at).
// kVarKeys (in the default): attention's key loop (n <= 32) fully unrolled to 16 or 32 keys:
// every key's probability shuffle and v load unconditional (row min(k, n - 1)), only the FMAs
// under k < n, so the loads issue ahead of the chain (w15's loop: unrolled by 4, a runtime trip
// count); the same FMAs in the same order (bitwise); and for n <= 16 the softmax's butterflies
// over 16 lanes (key_prob: the same values in the lanes read). rows14d call 1: 23.78 us against
// w15's 24.03 (medians of 3 alternated rounds).
// kVarRedux (in the default, rows14e; bitwise): the softmax's max over the keys by ONE
// redux.sync (the scores mapped to ints in the floats' order: a max is exact, so any order gives
// the same value) where pwkeys ran 4 (n <= 16) or 5 dependent shuffle + fmaxf steps: ~3 shuffle
// latencies (~25-30 cycles each) off attention's chain per layer, ~0.3k cycles per forward at
// (2, 16). The sum of the exponentials keeps its butterfly (a float sum's
// value depends on its order), the reciprocal 1 / sum stays IEEE.
// kVarSlots (in the default, rows14e; bitwise): the GEMM threads' ring slot of a piece without
// an integer division (and the last warp's prewaits and refills likewise). Without it the slot
// (i % ns, ns known at run time) compiled to a ~25-instruction division (I2F.RP, MUFU.RCP, F2I,
// IMAD.HI, fix-ups; sm_90a SASS of pwkeys' instance) that every GEMM stage (qkv, proj, fc1,
// fc2, lm_head: 17 per forward) ran right after its CTA barrier, before its first weight load:
// ~80-100 cycles each on the path. Here the kernel keeps pos = pi % ns by additions (one wrap per
// layer) and a stage's slot is pos + j wrapped by two compare-subtracts (j < 12 and ns >=
// kPrewaitSlots; lm_head: j < lm_pieces <= ns).
// Needs kVarPrewait (no mbarrier wait on the GEMM threads' side). Its instances also run dot64
// and lm_head's dot_rows fully unrolled (see there; 117 registers, no spills, sm_90a).
// kVarLnHoist (in the default, rows14e; bitwise): the one-row LayerNorm's gain and bias loaded
// with the row, before the statistics. layernorm_rows' output loop (w15's, other rp's) loads
// w[c] and b[c] after its statistics and after the previous element's store (its pointers may
// alias the output, so the compiler keeps the order): 4 dependent shared-memory round trips (~30 cycles
// each) at the end of every LayerNorm's chain (9 per forward); here the same arithmetic
// (row_stats<16, 4>, (v - mean) * rstd * w + b) with the loads issued first.
// (The values are rows14e's, 16 was lnpart's: bitw, the A/B baseline, is the instance rows14e
// measured, gpt_mega_rows_kernel<1, false, 111>; the default lm1 is <1, false, 1263>, head14's.)
// The head's lm_head (issue 14, head14): bitw's head (ln_f 0.63k, then lm_head + softmax +
// stores 4.6k cycles, all pieces prewaited) runs dot_rows<1, 64, 2> in EVERY thread: threads
// >= V - kThreads (99 at V 611) have no second column but run the second chain on w1 = w0 (the
// compiler cannot drop it: 32 LDS.128 and 128 FMAs per thread, 1024 chains' reads for 611
// columns, ~2.3k wavefronts of shared memory at 4 per LDS.128 where ~1.5k suffice).
// kVarLmOne (in the default, head14; bitwise): a warp none of whose lanes has a second column
// (warp * 32 + kThreads >= V: warps 4.. at V 611) runs one chain (the same FMAs in the same order
// for its columns).
// kVarLmStore (in the default, head14; bitwise): the logits' stores issued right after the
// chains, before the softmax's barriers (bitw stores them with the probs, at the end).
// lm1 (bitw | kVarLmOne | kVarLmStore): 21.02 us against bitw's 21.54 (experiments/25-compile/
// gpu_head14/call1, medians of 3 alternated rounds at (2, 16); 19.03-19.04 back to back against
// 19.53-19.65), both 7.15e-6 from the CPU on the probes.
constexpr int kVarW15 = 1, kVarPrewait = 2, kVarKeys = 4, kVarRedux = 8, kVarSlots = 32, kVarLnHoist = 64,
              kVarLmOne = 128, kVarLmStore = 1024;
constexpr int kPrewaitSlots = 8;  // the ring's slots kVarPrewait needs (see above)

bool rows_arch(const MegaDims& d) {
  return d.C == kC && d.H == kH && d.F == kF && d.L >= 1 && d.L <= kMegaMaxLayers && d.V >= 1;
}

// Offsets (floats) of a CTA's shared memory (host and device): the small vectors first (as the
// image holds them), the activations, the mbarriers, then the ring (ns slots: as many as fit,
// at most kMaxSlots).
struct RowsLayout {
  int rp, R, lm_pieces, pieces, small, ldv, x, ln, q, ks, vs, att, h, sc, red, spare, bars, ring, ns, total;
  __host__ __device__ RowsLayout(const MegaDims& d, int rows) {
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
    ks = take(d.T * kLd);  // every row's k, v of the sequence (the later ones unused)
    vs = take(d.T * kLd);
    att = take(rp * kLd);
    h = take(rp * kLdH);
    sc = take(rp * kH * (d.T + 1));  // a (row, head) item's scores
    red = take(2 * rp * kWarps);  // the softmax's per-warp maxima and sums
    spare = take(4 * kWarps);     // unused: lnpart's per-warp partials (removed), kept so the
                                  // layout (so the ring's offset and ns) stays the one measured
    bars = take(2 * kBars);
    ring = o;
    const int fit = (kSmemBudget / 4 - o) / kSlot;
    ns = fit < kMaxSlots ? fit : kMaxSlots;
    total = o + (ns > 0 ? ns : 0) * kSlot;
  }
  // Whether the ring can stream the model: every stage's pieces in the ring at once (fc1 and
  // fc2: 4 pieces, lm_head all of its pieces)
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
  const RowsLayout S(d, 1);
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

// x[i] = ((((p0 + p1) + p2) + p3) + bias) + x[i] for the CTA's rows i < nr (row stride kLd), by
// the lane holding p0 (owner), p1..p3 the sums of the lanes `d`, 2d, 3d above it (proj by heads
// and fc2 by slices: 4 lanes per output column). The whole warp calls it (the shuffles).
template <int RP>
__device__ __forceinline__ void add_slices_residual(const float (&acc)[1][RP], int d, bool owner, float bias, float* x,
                                                    int nr) {
#pragma unroll
  for (int i = 0; i < RP; ++i) {
    const float p0 = acc[0][i], p1 = __shfl_down_sync(0xffffffffu, p0, d), p2 = __shfl_down_sync(0xffffffffu, p0, 2 * d),
                p3 = __shfl_down_sync(0xffffffffu, p0, 3 * d);
    if (owner && i < nr) x[i * kLd] = ((((p0 + p1) + p2) + p3) + bias) + x[i * kLd];
  }
}

// kVarLnHoist's LayerNorm of the CTA's one row: layernorm_rows' arithmetic for one row (warp 0,
// lanes 0..15 each 4 values 16 apart, the 16-lane butterflies in both halves; lanes 16.. write
// nothing), the gain and bias loaded with the row.
__device__ __forceinline__ void layernorm_row1(const float* x, float* out, const float* w, const float* b, float eps) {
  if (threadIdx.x >= 32) return;
  const int sub = threadIdx.x & 15;
  float v[4], wv[4], bv[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    v[e] = x[sub + 16 * e];
    wv[e] = w[sub + 16 * e];
    bv[e] = b[sub + 16 * e];
  }
  const float2 st = row_stats<16, 4>(v, kC, eps);  // (mean, 1/sigma)
  if (threadIdx.x < 16) {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[sub + 16 * e] = (v[e] - st.x) * st.y * wv[e] + bv[e];
  }
}

// ---- diagnostics: stage timestamps (MINIGPT_MEGA_TRACE=1 selects the kTrace instance). The
// last CTA of cluster 0 (it waits for every other CTA's keys) stamps clock64 at each stage's end,
// and the cycles its thread 0 spent waiting for weight pieces so far (Ring::wait); launch
// kRowsTraceEvery / 2 of every kRowsTraceEvery prints the cycles per stage (and, in brackets,
// the weight waits among them: in the trace instance thread 0 first waits for the stage's LAST
// piece (Ring::probe), so the bracket is the time from the stage's start until all its weights
// had landed; the stage minus the bracket is its arithmetic after the last piece. The probe
// delays thread 0's own chain by that wait, at most the stage's weight wait). ----
// The head's stamps (after ln_f's barrier, slot 2 + 8 L): thread 0's lm_head chains done (3 +
// 8 L), the softmax's max barrier passed (4 + 8 L), its sum barrier passed (5 + 8 L); the report
// prints them as the head line's [chains, max, sum, probs + stores] when the probs were made.
constexpr int kRowsTraceSlots = 2 + 8 * kMegaMaxLayers + 4;
constexpr unsigned kRowsTraceEvery = 400;
__device__ long long g_rows_trace[kRowsTraceSlots];
__device__ long long g_rows_waited[kRowsTraceSlots];
__device__ unsigned g_rows_trace_launches;

template <bool kTrace>
struct Stamps {
  bool on;  // this CTA's thread 0 stamps
  long long t0_ns = 0;
  long long waited = 0;  // cycles in Ring::wait so far
  __device__ __forceinline__ void operator()(int slot) const {
    if constexpr (kTrace) {
      if (on) {
        g_rows_trace[slot] = clock64();
        g_rows_waited[slot] = waited;
      }
    }
  }
  __device__ void report(int L, int R, int rp, bool probs) const {
    if constexpr (kTrace) {
      if (!on) return;
      long long ns;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
      const long long end = clock64();
      if (atomicAdd(&g_rows_trace_launches, 1u) % kRowsTraceEvery != kRowsTraceEvery / 2) return;
      const long long *t = g_rows_trace, *w = g_rows_waited;
      printf("TRACE rows rp=%d R=%d (CTA %d) wall=%lld ns cycles=%lld (weights waited %lld) | start %lld\n", rp, R,
             R - 1, ns - t0_ns, end - t[0], waited, t[1] - t[0]);
      for (int l = 0; l < L; ++l) {
        const int u = 2 + 8 * l;
        printf("TRACE  layer %d: ln1 %lld qkv+push %lld (%lld) wait kv %lld attn %lld proj %lld (%lld) ln2 %lld fc1 %lld "
               "(%lld) fc2 %lld (%lld)\n",
               l, t[u] - t[u - 1], t[u + 1] - t[u], w[u + 1] - w[u], t[u + 2] - t[u + 1], t[u + 3] - t[u + 2],
               t[u + 4] - t[u + 3], w[u + 4] - w[u + 3], t[u + 5] - t[u + 4], t[u + 6] - t[u + 5], w[u + 6] - w[u + 5],
               t[u + 7] - t[u + 6], w[u + 7] - w[u + 6]);
      }
      const int h = 2 + 8 * L;
      if (probs)
        printf("TRACE  head: lnf %lld lm_head + softmax + stores %lld (%lld) [chains %lld max %lld sum %lld probs+stores "
               "%lld]\n",
               t[h] - t[h - 1], end - t[h], waited - w[h], t[h + 1] - t[h], t[h + 2] - t[h + 1], t[h + 3] - t[h + 2],
               end - t[h + 3]);
      else
        printf("TRACE  head: lnf %lld lm_head + stores %lld (%lld) (no probs)\n", t[h] - t[h - 1], end - t[h],
               waited - w[h]);
    }
  }
};

// ---- the ring of weight pieces ----
template <bool kTrace, int kVar>
struct Ring {
  float* slots;
  uint64_t* bars;
  const float* img;
  const RowsLayout& S;
  int L, V;
  Stamps<kTrace>& stamp;  // kTrace: the stamping thread counts its waits
  // copies the ring holds (a piece each)
  __device__ __forceinline__ int copies() const { return S.ns; }
  // The stamping thread (trace instance only) waits for piece `last` of the stage to come
  // (kVarPrewait: nothing; the stage's CTA barrier has certified its pieces, so its trace shows
  // no weight brackets, and thread 0's chain is the untraced one's).
  __device__ __forceinline__ void probe(int last) const {
    if constexpr (kTrace && (kVar & kVarPrewait) == 0) {
      if (stamp.on) wait(last);
    }
  }
  // kVarSlots: piece i0 + j's slot (x = (i0 + j) % ns) and copy count (y = (i0 + j) / ns) from
  // pos = i0 % ns and lap = i0 / ns without a division: pos + j < 3 ns (j < 12 <= 2 ns - 4 as ns
  // >= kPrewaitSlots; lm_head: j < lm_pieces <= ns).
  __device__ __forceinline__ int2 slot_lap(int pos, int lap, int j) const {
    int k = pos + j;
    if (k >= S.ns) {
      k -= S.ns;
      ++lap;
    }
    if (k >= S.ns) {
      k -= S.ns;
      ++lap;
    }
    return make_int2(k, lap);
  }
  // kVarSlots: a GEMM thread's piece i0 + j (a CTA barrier after prewait_at(.., > j) has passed).
  __device__ __forceinline__ const float* at(int pos, int j) const {
    static_assert((kVar & kVarPrewait) != 0, "kVarSlots reads pieces the last warp has waited for");
    return slots + slot_lap(pos, 0, j).x * kSlot;
  }
  // kVarPrewait (with kVarSlots): lane k of the last warp waits for piece i0 + ja + k (k < jb -
  // ja; the lanes' waits overlap; pos = i0 % ns, lap = i0 / ns), before the CTA barrier that
  // precedes the pieces' stage.
  __device__ __forceinline__ void prewait_at(int pos, int lap, int ja, int jb) const {
    static_assert((kVar & kVarPrewait) != 0, "kVarSlots: the last warp waits");
    const int k = static_cast<int>(threadIdx.x) - (kThreads - 32);
    if (k >= 0 && k < jb - ja) {
      const int2 sl = slot_lap(pos, lap, ja + k);
      wait_slot(sl.x, sl.y);
    }
  }
  // kVarSlots: refill(i0 + ja, i0 + jb) without a division, one piece per lane of the last
  // warp (kVarW15: the instances with kVarSlots, lm1 and bitw, all have it).
  __device__ __forceinline__ void refill_at(int pos, int i0, int ja, int jb) const {
    static_assert((kVar & kVarW15) != 0, "kVarSlots' refills: the last warp's (kVarW15)");
    const int k = static_cast<int>(threadIdx.x) - (kThreads - 32);
    if (k >= 0 && k < jb - ja) issue_to(slot_lap(pos, 0, ja + k).x, i0 + ja + k + S.ns);
  }
  // Piece i's slot once it has landed (the calling thread waits for its copy; without
  // kVarPrewait, every GEMM thread for its pieces).
  __device__ __forceinline__ const float* wait(int i) const { return wait_slot(i % S.ns, i / S.ns); }
  // The slot k's copy number c (piece c ns + k) once it has landed.
  __device__ __forceinline__ const float* wait_slot(int k, int c) const {
    long long t = 0;
    if constexpr (kTrace) t = clock64();
    detail::mbarrier_wait(&bars[k], static_cast<unsigned>(c & 1));
    if constexpr (kTrace) {
      if (stamp.on) stamp.waited += clock64() - t;
    }
    return slots + k * kSlot;
  }
  // One thread: piece i (if it exists) into its slot.
  __device__ __forceinline__ void issue(int i) const { issue_to(i % S.ns, i); }
  // One thread: piece i (if it exists) into slot k = i % ns.
  __device__ __forceinline__ void issue_to(int k, int i) const {
    if (i >= S.pieces) return;
    uint64_t* bar = &bars[k];
    const unsigned bytes = piece_bytes(S, L, V, i);
    detail::mbarrier_arrive_expect_tx(bar, bytes);
    detail::bulk_load(slots + k * kSlot, img + piece_offset(S, i), bytes, bar);
  }
  // Every thread, after the CTA barrier that ends the reads of pieces [a, b): their slots take
  // the pieces a ring later, one per lane of warp 0 (one thread issuing them in turn kept the
  // others waiting at the next barrier). Only the kVar 0 instances (rp 2 and 4) call it; kVarW15
  // (the last warp's lanes) is refill_at's.
  __device__ __forceinline__ void refill(int a, int b) const {
    static_assert((kVar & kVarW15) == 0, "kVarW15 comes with kVarSlots: refill_at");
    const int k = static_cast<int>(threadIdx.x);
    if (k >= 0 && k < b - a) issue(a + k + S.ns);
  }
};

// acc[j][i] = sum over k in [0, K) of a[i][k] * w[j][k], k in order from 0, for the RP rows of
// a (row stride lda; every lane of a warp reads the same a: a broadcast) and NW weight rows w[j]
// (NW independent chains per row: a thread with two lm_head columns runs them side by side).
// kUnroll: the k loop's unroll (in steps of 4 k; kVarSlots' lm_head: all of it, its later loads
// then overlap the chains).
template <int RP, int K, int NW = 1, int kUnroll = 4>
__device__ __forceinline__ void dot_rows(const float* a, int lda, const float* const (&w)[NW], float (&acc)[NW][RP]) {
#pragma unroll
  for (int j = 0; j < NW; ++j)
#pragma unroll
    for (int i = 0; i < RP; ++i) acc[j][i] = 0.0f;
#pragma unroll kUnroll
  for (int k = 0; k < K; k += 4) {
    float4 wv[NW];
#pragma unroll
    for (int j = 0; j < NW; ++j) wv[j] = *reinterpret_cast<const float4*>(w[j] + k);
#pragma unroll
    for (int i = 0; i < RP; ++i) {
      const float4 av = *reinterpret_cast<const float4*>(a + i * lda + k);
#pragma unroll
      for (int j = 0; j < NW; ++j) {
        acc[j][i] = fmaf(av.x, wv[j].x, acc[j][i]);
        acc[j][i] = fmaf(av.y, wv[j].y, acc[j][i]);
        acc[j][i] = fmaf(av.z, wv[j].z, acc[j][i]);
        acc[j][i] = fmaf(av.w, wv[j].w, acc[j][i]);
      }
    }
  }
}

// acc = a's RP rows (stride lda) times the weight row w over k = 64, in k order from 0: one
// 64-FMA chain per thread. kFull (kVarSlots' instances): the k loop fully unrolled, so
// the compiler can issue the later float4 loads while the chain runs (dot_rows' `unroll 4` ran 4
// iterations of 8 LDS.128 then 16 dependent FMAs, each iteration's loads after the previous
// chain: sm_90a SASS); the same FMAs in the same order.
template <int RP, bool kFull = false>
__device__ __forceinline__ void dot64(const float* a, int lda, const float* w, float (&acc)[1][RP]) {
  dot_rows<RP, kC, 1, kFull ? kC / 4 : 4>(a, lda, {w}, acc);
}

// Lane k's probability of key k < n (s: its score, -inf in lanes >= n; the whole warp): the
// scores' max and the sum of exp(s - max) by xor butterflies from offset TOP down (TOP 16: all 32
// lanes; TOP 8 for n <= 16, kVarKeys: lanes 16.. hold -inf and 0, so the step over 16 changes no
// value in lanes < 16, the only ones read: the same values there, one shuffle step fewer on each).
// kRedux (kVarRedux): the max by one redux.sync over the whole warp (lanes >= n hold -inf, no
// NaN scores but from NaN inputs, whose rows are NaN either way: the sum is then NaN).
template <int TOP, bool kRedux = false>
__device__ __forceinline__ float key_prob(float s, int lane, int n) {
  float m = s;
  if constexpr (kRedux) {
    // a float's bits as an int in the floats' order: non-negative ones as they are, negative
    // ones with the magnitude bits flipped (-0 just below +0: either is a max of 0, s - m the same)
    const int bits = __float_as_int(s);
    const int key = __reduce_max_sync(0xffffffffu, bits >= 0 ? bits : bits ^ 0x7fffffff);
    m = __int_as_float(key >= 0 ? key : key ^ 0x7fffffff);
  } else {
#pragma unroll
    for (int off = TOP; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  }
  const float ex = lane < n ? expf(s - m) : 0.0f;
  float sum = ex;
#pragma unroll
  for (int off = TOP; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  return ex * (1.0f / sum);
}

// One (row, head)'s att columns e..e+3 over keys 0..n-1 (n <= KMAX, the whole warp): key k's
// probability from lane k (pr), times v row k (rows kLd apart), in key order, fully unrolled;
// every shuffle and load unconditional (row min(k, n - 1): the rows exist), only the FMAs under
// k < n, so the loads can issue ahead of the chain (kVarKeys; the FMAs of the plain loop).
template <int KMAX>
__device__ __forceinline__ float4 att_keys_unrolled(float pr, const float* vs, int e, int n) {
  float4 a = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < KMAX; ++k) {
    const float pk = __shfl_sync(0xffffffffu, pr, k);
    const float4 vv = *reinterpret_cast<const float4*>(vs + min(k, n - 1) * kLd + e);
    if (k < n) {
      a.x = fmaf(pk, vv.x, a.x);
      a.y = fmaf(pk, vv.y, a.y);
      a.z = fmaf(pk, vv.z, a.z);
      a.w = fmaf(pk, vv.w, a.w);
    }
  }
  return a;
}

// ---- the kernel ----
// RP rows per CTA (compile time: the accumulators are registers); the cluster (R CTAs) is one
// sequence, blockIdx.x / R.
template <int RP, bool kTrace, int kVar>
__global__ void __launch_bounds__(kThreads, 1) gpt_mega_rows_kernel(const __grid_constant__ MegaParams p) {
  extern __shared__ __align__(16) float sm[];
  const MegaDims& d = p.dims;
  const RowsLayout S(d, RP);
  const int T = d.T, V = d.V, R = S.R, L = d.L;
  const int r = static_cast<int>(cluster_ctarank()), b = static_cast<int>(blockIdx.x) / R;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int t0 = r * RP, nr = min(RP, T - t0);
  const int64_t row0 = static_cast<int64_t>(b) * T + t0;  // global row of this CTA's first row
  float *x = sm + S.x, *ln = sm + S.ln, *qs = sm + S.q, *att = sm + S.att;
  float* h = sm + S.h;
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + S.bars);
  Stamps<kTrace> stamp{b == 0 && r == R - 1 && tid == 0};
  // The LayerNorm of the CTA's rows of x into ln
  auto layernorm = [&](const float* w, const float* bb) {
    if constexpr ((kVar & kVarLnHoist) != 0)
      layernorm_row1(x, ln, w, bb, p.eps);
    else
      layernorm_rows<kC>(x, ln, 0, nr, kC, kLd, w, bb, p.eps);
  };
  const Ring<kTrace, kVar> ring{sm + S.ring, bars, p.image, S, L, V, stamp};
  static_assert(RP == 1 || (kVar & (kVarLnHoist | kVarSlots)) == 0, "kVarLnHoist, kVarSlots: one row per CTA");
  static_assert(((kVar & kVarPrewait) != 0) == ((kVar & kVarSlots) != 0), "kVarPrewait and kVarSlots come together");
  // A GEMM stage's piece i0 + j (i0 = pi, the layer's first piece, or the head's; kVarSlots:
  // from pos = i0 % ns without a division)
  int pos = 0, lap = 0;  // kVarSlots: pi = lap ns + pos
  constexpr bool kSlotsOn = (kVar & kVarSlots) != 0;  // (and dot64's full unroll)
  auto piece = [&](int i0, int j) -> const float* {
    if constexpr (kSlotsOn)
      return ring.at(pos, j);
    else
      return ring.wait(i0 + j);
  };
  // the ring's prewait (kVarPrewait; otherwise nothing) and refill of pieces [i0 + ja, i0 + jb)
  // (kVarSlots: without a division)
  auto prewait = [&](int ja, int jb) {
    if constexpr (kSlotsOn) ring.prewait_at(pos, lap, ja, jb);
  };
  auto refill = [&](int i0, int ja, int jb) {
    if constexpr (kSlotsOn)
      ring.refill_at(pos, i0, ja, jb);
    else
      ring.refill(i0 + ja, i0 + jb);
  };
  if constexpr (kTrace) {
    if (stamp.on) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(stamp.t0_ns));
  }
  stamp(0);

  // start: thread 0 initialises every mbarrier behind one fence and puts the small vectors'
  // copy in flight, then lane j of warp 0 the ring's piece j; warps 1.. embed this CTA's rows
  // meanwhile
  if (warp == 0) {
    if (lane == 0) {
      for (int i = 0; i < kBars; ++i) detail::mbarrier_init_unfenced(&bars[i]);
      detail::fence_mbarrier_init();
      detail::mbarrier_arrive_expect_tx(&bars[kBarSmall], S.small * 4u);
      detail::bulk_load(sm, p.image, S.small * 4u, &bars[kBarSmall]);
    }
    __syncwarp();
    if (lane < ring.copies()) ring.issue(lane);
  } else {
    for (int f = tid - 32; f < nr * (kC / 4); f += kThreads - 32) {  // (warps 1..)
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
  float acc[1][RP];
  for (int l = 0; l < L; ++l) {
    const float* sw = sm + l * kSmallLayer;
    const int pi = l * kPiecesPerLayer;
    float *ks = sm + S.ks, *vs = sm + S.vs;
    // q, k, v: a thread per output column (q 0..63, k 64..127, v 128..191) for all rows
    const bool qkv_thread = tid < 3 * kC;
    const int qcol = tid;
    layernorm(sw + kLn1w, sw + kLn1b);
    prewait(0, kPieceProj);
    __syncthreads();
    stamp(2 + 8 * l);
    ring.probe(pi + kPieceProj - 1);
    if (qkv_thread) dot64<RP, kSlotsOn>(ln, kLd, piece(pi, qcol / kPieceRows) + (qcol % kPieceRows) * kLd, acc);
    cluster_wait();  // every CTA has read the previous layer's k, v (layer 0: every CTA runs)
    if (qkv_thread) {
      const int part = qcol / kC, c = qcol % kC;
      const float bias = sw[kQkvb + qcol];
#pragma unroll
      for (int i = 0; i < RP; ++i) {
        if (i >= nr) break;
        const float v = acc[0][i] + bias;
        if (part == 0) {
          qs[i * kLd + c] = v;
        } else {  // to this CTA and every later one (their rows attend to it): lane 4j sends
                  // columns 4j..4j+3 as one 16-byte store (a warp is 32 columns of one part)
          float* dst = (part == 1 ? ks : vs) + (t0 + i) * kLd + c;
          *dst = v;
          const float4 v4 = make_float4(v, __shfl_down_sync(0xffffffffu, v, 1), __shfl_down_sync(0xffffffffu, v, 2),
                                        __shfl_down_sync(0xffffffffu, v, 3));
          for (int q = r + 1; q < R && lane % 4 == 0; ++q)
            st_async4(shared_addr_in(dst, q), v4, shared_addr_in(&bars[kBarKv], q));
        }
      }
    }
    stamp(3 + 8 * l);
    // the earlier CTAs' rows: t0 rows of k and v
    __syncthreads();
    if (tid == 0) stage_arrive(&bars[kBarKv], static_cast<unsigned>(t0 * 2 * kC) * 4u);
    refill(pi, 0, kPieceProj);
    stage_wait(&bars[kBarKv], static_cast<unsigned>(l & 1));
    stamp(4 + 8 * l);

    // attention: a warp per (own row i, head hh), keys 0..t
    for (int item = warp; item < nr * kH; item += kWarps) {
      const int i = item / kH, hh = item % kH, n = t0 + i + 1;
      const float* qt = qs + i * kLd + hh * kDh;
      const int e = hh * kDh + (lane % (kDh / 4)) * 4;  // lanes < dh / 4: att's 4 columns e..e+3
      float4 a = {0.f, 0.f, 0.f, 0.f};
      // att = probabilities times v, in key order
      auto add_key = [&](float pr, int k) {
        const float4 vv = *reinterpret_cast<const float4*>(vs + k * kLd + e);
        a.x = fmaf(pr, vv.x, a.x);
        a.y = fmaf(pr, vv.y, a.y);
        a.z = fmaf(pr, vv.z, a.z);
        a.w = fmaf(pr, vv.w, a.w);
      };
      if (n <= 32) {
        // a key per lane: warp_softmax_inplace's arithmetic in registers (the same values, no
        // shared-memory round trips), each probability broadcast by a shuffle in key order
        const float s = lane < n ? dot_qk(qt, ks + lane * kLd + hh * kDh, kDh) * scale : -CUDART_INF_F;
        if constexpr ((kVar & kVarKeys) != 0) {
          constexpr bool kRedux = (kVar & kVarRedux) != 0;
          a = n <= 16 ? att_keys_unrolled<16>(key_prob<8, kRedux>(s, lane, n), vs, e, n)
                      : att_keys_unrolled<32>(key_prob<16, kRedux>(s, lane, n), vs, e, n);
        } else {
          const float pr = key_prob<16>(s, lane, n);
          for (int k = 0; k < n; ++k) {
            const float pk = __shfl_sync(0xffffffffu, pr, k);
            if (lane < kDh / 4) add_key(pk, k);
          }
        }
      } else {  // the scores through shared memory
        float* row = sm + S.sc + item * (T + 1);
        for (int k = lane; k < n; k += 32) row[k] = dot_qk(qt, ks + k * kLd + hh * kDh, kDh) * scale;
        __syncwarp();
        warp_softmax_inplace(row, n);
        __syncwarp();
        if (lane < kDh / 4)
          for (int k = 0; k < n; ++k) add_key(row[k], k);
      }
      if (lane < kDh / 4) *reinterpret_cast<float4*>(att + i * kLd + e) = a;
    }
    prewait(kPieceProj, kPieceFc1);
    __syncthreads();
    if (l + 1 < L) cluster_arrive_relaxed();  // this CTA's k, v are read: the next layer's may come
    stamp(5 + 8 * l);

    // proj + residual: 4 lanes 8 apart per output column n (warp w: columns 8w..8w+7), lane s
    // adding head s's 16 k in order; lane 0 adds the heads' sums in head order, then b, then x
    // (gpt_mega's forward, proj by heads, adds in that order). A quarter-warp: one att address
    // (a broadcast), 8 weight rows (8 bank groups).
    ring.probe(pi + kPieceProj);
    if (tid < 4 * kC) {
      const int s = lane >> 3, n = 8 * warp + (lane & 7);
      dot_rows<RP, kDh>(att + s * kDh, kLd, {piece(pi, kPieceProj) + n * kLd + s * kDh}, acc);
      add_slices_residual<RP>(acc, 8, s == 0, sw[kProjb + n], x + n, nr);
    }
    __syncthreads();
    refill(pi, kPieceProj, kPieceFc1);
    stamp(6 + 8 * l);

    layernorm(sw + kLn2w, sw + kLn2b);
    prewait(kPieceFc1, kPieceFc2);
    __syncthreads();
    stamp(7 + 8 * l);

    // fc1 + GELU: a thread per output column f, into h as 4 slices of 64
    // columns (fc2's k), each padded to 68
    ring.probe(pi + kPieceFc2 - 1);
    if (tid < kF) {
      const int f = tid;
      dot64<RP, kSlotsOn>(ln, kLd, piece(pi, kPieceFc1 + f / kPieceRows) + (f % kPieceRows) * kLd, acc);
      const float bias = sw[kFc1b + f];
#pragma unroll
      for (int i = 0; i < RP; ++i)
        if (i < nr) h[i * kLdH + (f / kC) * kLd + f % kC] = gelu_erf(acc[0][i] + bias);
    }
    prewait(kPieceFc2, kPiecesPerLayer);  // the last warp is idle in fc1
    __syncthreads();
    refill(pi, kPieceFc1, kPieceFc2);
    stamp(8 + 8 * l);

    // fc2 + residual: 4 lanes per output column n, lane s adding k in [64 s, 64 s + 64) in
    // order; lane 0 adds the slices' sums in slice order, then b, then x. A quarter-warp reads
    // 4 slices of h (68 apart: 4 bank groups, no conflict; 64 apart they took 4 wavefronts each,
    // ~2k cycles per row per layer, H200 trace) and 8 weight rows (272 apart: 8 bank groups).
    ring.probe(pi + kPiecesPerLayer - 1);
    if (tid < 4 * kC) {
      const int n = tid >> 2, s = tid & 3;
      dot64<RP, kSlotsOn>(h + s * kLd, kLdH, piece(pi, kPieceFc2 + n / kFc2Rows) + (n % kFc2Rows) * kFc2Ld + s * kLd, acc);
      add_slices_residual<RP>(acc, 1, s == 0, sw[kFc2b + n], x + n, nr);
    }
    __syncthreads();
    refill(pi, kPieceFc2, kPiecesPerLayer);
    stamp(9 + 8 * l);
    if constexpr (kSlotsOn) {  // pos, lap: the next layer's (or the head's) pi % ns, pi / ns
      pos += kPiecesPerLayer;
      while (pos >= S.ns) {
        pos -= S.ns;
        ++lap;
      }
    }
  }

  // head: ln_f; lm_head, a thread per vocabulary column n = tid (and tid + kThreads: both
  // chains side by side; kVarLmOne: one chain in the warps with no second column), the logits
  // kept in registers; the softmax over the whole CTA: the row's max and then its sum of
  // exp(l - max), each a warp butterfly and the warps' values in warp order (kWarps per row
  // through shared memory, one CTA barrier each); a NaN logit makes the sum, so the row, NaN
  const float* hd = sm + L * kSmallLayer;
  layernorm(hd + kLnfw, hd + kLnfb);
  const int pl = L * kPiecesPerLayer;
  prewait(0, S.lm_pieces);
  __syncthreads();
  stamp(2 + 8 * L);
  ring.probe(pl + S.lm_pieces - 1);
  // V <= 64 lm_pieces <= 64 ns <= 64 kMaxSlots (RowsLayout::fits): n0 and n1 cover the vocabulary
  static_assert(kMaxSlots * kPieceRows <= 2 * kThreads, "two vocabulary columns per thread at most");
  constexpr bool kLmOne = (kVar & kVarLmOne) != 0;
  static_assert(RP == 1 || (kVar & (kVarLmOne | kVarLmStore)) == 0, "the head's variants: one row per CTA");
  constexpr int kLmUnroll = kSlotsOn ? kC / 4 : 4;  // (steps of 4 k)
  const int n0 = tid, n1 = tid + kThreads;
  float lgt[2][RP];
  if (n0 < V) {
    const float* w0 = piece(pl, n0 / kPieceRows) + (n0 % kPieceRows) * kLd;
    if (kLmOne && warp * 32 + kThreads >= V) {  // kVarLmOne: no lane of this warp has a second column
      float a0[1][RP];
      dot_rows<RP, kC, 1, kLmUnroll>(ln, kLd, {w0}, a0);
#pragma unroll
      for (int i = 0; i < RP; ++i) {
        lgt[0][i] = a0[0][i] + hd[kLmb + n0];
        lgt[1][i] = 0.0f;
      }
    } else {
      const float* w1 = n1 < V ? piece(pl, n1 / kPieceRows) + (n1 % kPieceRows) * kLd : w0;
      dot_rows<RP, kC, 2, kLmUnroll>(ln, kLd, {w0, w1}, lgt);
#pragma unroll
      for (int i = 0; i < RP; ++i) {
        lgt[0][i] += hd[kLmb + n0];
        lgt[1][i] += n1 < V ? hd[kLmb + n1] : 0.0f;
      }
    }
  }
  if constexpr (kTrace) {  // thread 0's chains done (clock64 after its logits exist)
    if (stamp.on) asm volatile("" ::"f"(lgt[0][0]), "f"(lgt[1][0]));
  }
  stamp(3 + 8 * L);
  auto store = [&](float* out, int n, int i, float v) {
    if (n < V && i < nr) out[(row0 + i) * V + n] = v;
  };
  if (!p.probs) {
#pragma unroll
    for (int i = 0; i < RP; ++i) {
      store(p.logits, n0, i, lgt[0][i]);
      store(p.logits, n1, i, lgt[1][i]);
    }
    stamp.report(L, R, RP, false);
    return;
  }
  constexpr bool kStoreFirst = (kVar & kVarLmStore) != 0;
  if constexpr (kStoreFirst) {  // kVarLmStore: the logits' stores issued before the softmax
    store(p.logits, n0, 0, lgt[0][0]);
    store(p.logits, n1, 0, lgt[1][0]);
  }
  float* red = sm + S.red;  // (2, RP, kWarps): the warps' maxima, then their sums
  float mx[RP], e[2][RP], sum[RP];
#pragma unroll
  for (int i = 0; i < RP; ++i) {
    mx[i] = n0 < V ? lgt[0][i] : -CUDART_INF_F;
    if (n1 < V) mx[i] = fmaxf(mx[i], lgt[1][i]);
    for (int off = 16; off > 0; off >>= 1) mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], off));
    if (lane == 0) red[i * kWarps + warp] = mx[i];
  }
  __syncthreads();
  stamp(4 + 8 * L);
#pragma unroll
  for (int i = 0; i < RP; ++i) {
    float m = red[i * kWarps];
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[i * kWarps + w]);
    e[0][i] = n0 < V ? expf(lgt[0][i] - m) : 0.0f;
    e[1][i] = n1 < V ? expf(lgt[1][i] - m) : 0.0f;
    sum[i] = e[0][i] + e[1][i];
    for (int off = 16; off > 0; off >>= 1) sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], off);
    if (lane == 0) red[(RP + i) * kWarps + warp] = sum[i];
  }
  __syncthreads();
  stamp(5 + 8 * L);
#pragma unroll
  for (int i = 0; i < RP; ++i) {
    float total = red[(RP + i) * kWarps];
    for (int w = 1; w < kWarps; ++w) total += red[(RP + i) * kWarps + w];
    const float inv = 1.0f / total;
    if constexpr (!kStoreFirst) {
      store(p.logits, n0, i, lgt[0][i]);
      store(p.logits, n1, i, lgt[1][i]);
    }
    store(p.probs, n0, i, e[0][i] * inv);
    store(p.probs, n1, i, e[1][i] * inv);
  }
  stamp.report(L, R, RP, true);
}

using RowsKernel = void (*)(MegaParams);

template <int kVar>
RowsKernel rows1_kernel(bool trace) {
  return trace ? gpt_mega_rows_kernel<1, true, kVar> : gpt_mega_rows_kernel<1, false, kVar>;
}

}  // namespace

int gpt_mega_rows_variant() {
  const char* v = std::getenv("MINIGPT_MEGA_ROWS_VARIANT");
  if (!v || !*v) return 0;  // lm1 (head14 call 1: 21.02 us against bitw's 21.54)
  std::string known;  // the words, from kMegaRowsVariants (the first is the default)
  for (int i = 0; i < static_cast<int>(std::size(kMegaRowsVariants)); ++i) {
    if (std::strcmp(v, kMegaRowsVariants[i]) == 0) return i;
    known += cat(i ? ", " : "", kMegaRowsVariants[i], i ? "" : " (the default)");
  }
  MINIGPT_CUDA_REQUIRE(false, "MINIGPT_MEGA_ROWS_VARIANT=", v, ": expected one of ", known);
  return 0;
}

namespace {

// kVar of each of kMegaRowsVariants (rp 1 only; other rp run kVar 0): lm1 (the default), bitw.
// (The values, so the instances' names, are those head14 measured: lm1 gpt_mega_rows_kernel<1,
// false, 1263>, bitw <1, false, 111>.)
constexpr int kVarBitw = kVarW15 | kVarPrewait | kVarKeys | kVarRedux | kVarSlots | kVarLnHoist;
constexpr int kVarLm1 = kVarBitw | kVarLmOne | kVarLmStore;
static_assert(kVarBitw == 111 && kVarLm1 == 1263, "the measured instances' names");
constexpr int kVariantBits[] = {kVarLm1, kVarBitw};
static_assert(std::size(kVariantBits) == std::size(kMegaRowsVariants), "a kVar per variant name");

// The instance for rp rows per CTA (the variants, MINIGPT_MEGA_ROWS_VARIANT: rp 1 only).
// Reads the environment: called once per launch or query.
RowsKernel rows_kernel_for(int rp) {
  static const bool trace = std::getenv("MINIGPT_MEGA_TRACE") != nullptr;  // diagnostics, read once
  switch (rp) {
    case 1:
      // kMegaRowsVariants' order, a case per variant: a new word without its case is a compile error here
      static_assert(std::size(kVariantBits) == 2, "a case below per kVariantBits entry");
      switch (gpt_mega_rows_variant()) {
        case 1: return rows1_kernel<kVariantBits[1]>(trace);
        default: return rows1_kernel<kVariantBits[0]>(trace);  // 0 (gpt_mega_rows_variant: 0 or 1)
      }
    case 2: return trace ? gpt_mega_rows_kernel<2, true, 0> : gpt_mega_rows_kernel<2, false, 0>;
    case 4: return trace ? gpt_mega_rows_kernel<4, true, 0> : gpt_mega_rows_kernel<4, false, 0>;
    default: return nullptr;
  }
}

// Whether the kernel takes dims at rp rows per CTA (shape only; residency is the device's).
bool rows_takes(const MegaDims& d, int rp) {
  if (std::find(std::begin(kMegaRowsChoices), std::end(kMegaRowsChoices), rp) == std::end(kMegaRowsChoices) || !rows_arch(d) || d.cache || d.split_k || d.B < 1 || d.T < 1 || d.T > d.P ||
      d.capacity != d.T)
    return false;
  const RowsLayout S(d, rp);
  const int bits = rp == 1 ? kVariantBits[gpt_mega_rows_variant()] : 0;
  return S.R <= 16 && S.fits() && (!(bits & kVarPrewait) || S.ns >= kPrewaitSlots) &&
         static_cast<int64_t>(d.B) * S.R <= 65535;
}

}  // namespace

size_t gpt_mega_rows_smem(const MegaDims& d, int rp) {
  if (!rows_takes(d, rp)) return 0;
  return static_cast<size_t>(RowsLayout(d, rp).total) * sizeof(float);
}

int gpt_mega_rows_cluster(const MegaDims& d, int rp) {
  const size_t smem = gpt_mega_rows_smem(d, rp);
  if (smem == 0) return 0;
  const int R = ceil_div(d.T, rp);
  const RowsKernel kernel = rows_kernel_for(rp);
  if (!prepare_kernel(kernel, R, smem)) return 0;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(R, smem, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
    cudaGetLastError();
    return 0;
  }
  return R;
}

size_t gpt_mega_rows_image_floats(const MegaDims& d) {
  if (!rows_arch(d)) return 0;
  const RowsLayout S(d, 1);
  return static_cast<size_t>(piece_offset(S, S.pieces));
}

void gpt_mega_rows_pack(const MegaParams& p, float* image, cudaStream_t stream) {
  const size_t floats = gpt_mega_rows_image_floats(p.dims);
  MINIGPT_CUDA_REQUIRE(floats > 0 && image, "gpt_mega_rows_pack: the architecture (C=", p.dims.C, ", H=", p.dims.H,
                       ", F=", p.dims.F, ") is not the one it takes (C 64, H 4, F 256), or the image is null");
  MINIGPT_CUDA_CHECK(cudaMemsetAsync(image, 0, floats * sizeof(float), stream));
  gpt_mega_rows_pack_kernel<<<1 + RowsLayout(p.dims, 1).pieces, 256, 0, stream>>>(p, image);
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
  const RowsKernel kernel = rows_kernel_for(rp);
  MINIGPT_CUDA_REQUIRE(prepare_kernel(kernel, R, smem), "gpt_mega_rows: ", smem,
                       " bytes of shared memory at cluster size ", R, " do not fit the device");
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = launch_config(R, smem, stream, attr);
  cfg.gridDim = dim3(static_cast<unsigned>(d.B * R));  // a cluster per sequence
  MINIGPT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

}  // namespace minigpt::cuda
