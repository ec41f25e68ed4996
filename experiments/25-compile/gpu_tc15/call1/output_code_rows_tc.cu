// graph gpt_B2_T16 (0826be997856d8a1): the rows form (codegen_cuda_rows.h)
// (its default text, the same values bitwise as the plain text, MINIGPT_CUDA_VARIANT=rows-plain: the
// LayerNorm's gain and bias loaded with the row, the attention's max by redux.sync and its key loop
// unrolled, rw_dot's k loop unrolled, a matmul's pieces waited for by the last warp before the barrier
// preceding it where their copies are in flight there, ring slots without divisions; a matmul of more
// than one chain per thread runs its chains by warp, and the softmax reading only the logits is fused
// into their matmul stage)
// (rows-tc, MINIGPT_CUDA_VARIANT=rows-tc: every matmul stage on the tensor cores, mma.sync m16n8k8 tf32 with
// both operands split hi + lo (FP32-accurate), the weights' pieces in fragment order; codegen_cuda_rows.h)
#define CUDART_INF_F __int_as_float(0x7f800000)

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
// sum over k in [0, K) of a[k] * w_j[k] for J weight rows side by side, k in order from 0, one FMA
// chain each (a: a broadcast over the warp; w: 16-byte aligned). For K <= 64 the k loop is fully
// unrolled, so the later float4 loads issue while the chain runs (K > 64: unrolled by 4); the same
// FMAs in the same order either way
template <int K, int J>
__device__ __forceinline__ void rw_dot(const float* a, const float* const (&w)[J], float (&acc)[J]) {
  constexpr int kUnroll = K <= 64 ? K / 4 : 4;
#pragma unroll
  for (int j = 0; j < J; ++j) acc[j] = 0.0f;
#pragma unroll kUnroll
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
// LayerNorm of one row of C (a multiple of 16) by a half-warp (the calling warp; lanes 16..31
// compute the same and write nothing): the statistics in double in one pass, a 16-lane butterfly,
// the variance E[x^2] - mean^2 clamped at 0, 1/sigma a float rsqrtf. The gain and bias are loaded
// WITH the row, before the statistics: loaded after them, each w[c], b[c] could wait for the
// previous element's store wherever the compiler cannot tell out from w and b apart (here all are
// constant offsets from one base, so it may already load them early; this does not rely on that)
template <int C>
__device__ __forceinline__ void rw_layernorm(const float* x, float* out, const float* w, const float* b, float eps) {
  constexpr int E = C / 16;
  const int sub = threadIdx.x & 15;
  float v[E], wv[E], bv[E];
  double dv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    v[e] = x[sub + 16 * e];
    wv[e] = w[sub + 16 * e];
    bv[e] = b[sub + 16 * e];
    dv[e] = v[e];
  }
  double s, q;
  if constexpr (E == 4) {
    s = (dv[0] + dv[1]) + (dv[2] + dv[3]);
    q = fma(dv[0], dv[0], dv[1] * dv[1]) + fma(dv[2], dv[2], dv[3] * dv[3]);
  } else {
    s = 0.0; q = 0.0;
#pragma unroll
    for (int e = 0; e < E; ++e) { s += dv[e]; q = fma(dv[e], dv[e], q); }
  }
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) {
    s += __shfl_xor_sync(RW_FULL, s, off);
    q += __shfl_xor_sync(RW_FULL, q, off);
  }
  const double inv_c = 1.0 / static_cast<double>(C);
  const double m = s * inv_c;
  const double var = fmax(q * inv_c - m * m, 0.0);
  const float mean = static_cast<float>(m), rstd = rsqrtf(static_cast<float>(var + static_cast<double>(eps)));
  if ((threadIdx.x & 31) < 16) {
#pragma unroll
    for (int e = 0; e < E; ++e) out[sub + 16 * e] = (v[e] - mean) * rstd * wv[e] + bv[e];
  }
}
// a score before its scale: q . k over dh (a multiple of 4) in e order, one FMA chain
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
// the warp's max of s by ONE redux.sync (where a butterfly takes 5 dependent shuffle + fmaxf
// steps): the floats' bits mapped to ints in the floats' order (non-negative ones as they are,
// negative ones with the magnitude bits flipped; -0 just below +0, either a max of 0 giving the same
// s - max). A max is exact in any order: the butterfly's value (a NaN score makes the row NaN
// either way)
__device__ __forceinline__ float rw_warp_max(float s) {
  const int bits = __float_as_int(s);
  const int key = __reduce_max_sync(RW_FULL, bits >= 0 ? bits : bits ^ 0x7fffffff);
  return __int_as_float(key >= 0 ? key : key ^ 0x7fffffff);
}
// ---- rows-tc: a matmul's GEMV on the tensor cores (mma.sync m16n8k8 tf32) ----
// FP32-accurate by a split of both operands: w = hi + lo, hi = tf32(w) (round to nearest, 11
// significant bits), lo = tf32(w - hi) (w - hi is exact in fp32 and <= 2^-11 |w|, so hi + lo is w to
// 2^-22 |w|); the activation in three, x = hi + lo + lo2 (lo2 = tf32(x - hi - lo), the <= 2 bits
// left: x exactly), B's columns 0, 1, 2 (free: an mma has 8); every product of a part of w by a part
// of x exact (11 x 11 bits), accumulated in fp32: y = sum_k W[n][k] x[k] to about fp32's rounding
// (in another order than the FMA chain's)
__device__ __forceinline__ unsigned rw_tf32(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ void rw_tc_split(float v, unsigned& hi, unsigned& lo) {
  hi = rw_tf32(v);
  lo = rw_tf32(v - __uint_as_float(hi));
}
// D (16 x 8, f32) += A (16 x 8, tf32: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4])
// times B (8 x 8, tf32: b0 = B[t][g], b1 = B[t + 4][g]); g = lane / 4, t = lane % 4
__device__ __forceinline__ void rw_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x[0, 8 KS) (16-byte aligned; KS even) -> the B fragments of KS k-steps, read ONCE per warp (every
// lane calls), a float4 per lane per two steps: the k order is permuted within each 16 k (the
// weights' fragment order the same way: rows_tc_frag_index), so that lane t's b0, b1 of steps 2J
// and 2J + 1 are x[16 J + 4 t + 0..3]: B[t][0] = hi of x[16 J + 4 t + 2 h], B[t + 4][0] = hi of
// x[16 J + 4 t + 2 h + 1] in step 2J + h; B[.][1] the los, B[.][2] the lo2s; columns 3..7 zero.
// Lanes 0..3 (g = 0) hold the his, 4..7 the los, 8..11 the lo2s, the others zeros (4 distinct
// addresses per load: one wavefront)
template <int KS>
__device__ __forceinline__ void rw_tc_x(const float* x, unsigned (&b)[KS][2]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < KS; j += 2) {
    const float4 v = *reinterpret_cast<const float4*>(x + 8 * j + 4 * t);
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      unsigned hi, lo;
      rw_tc_split(e[i], hi, lo);
      const unsigned lo2 = rw_tf32((e[i] - __uint_as_float(hi)) - __uint_as_float(lo));  // (both subtractions exact)
      b[j + i / 2][i % 2] = g == 0 ? hi : g == 1 ? lo : g == 2 ? lo2 : 0u;
    }
  }
}
// one 16-column tile over KS k-steps: w its first block in fragment order (128 floats per k-step,
// lane L's 4 at 4 L: its A fragment), b the steps' B fragments; D = W_hi B + W_lo B, four
// accumulators (the hi and lo products of even and odd steps: chains of KS / 2 mmas) added in a
// fixed order
template <int KS>
__device__ __forceinline__ void rw_tc_tile(const float* w, const unsigned (&b)[KS][2], float (&d)[4]) {
  const int lane = threadIdx.x & 31;
  float e[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int i = 0; i < 4; ++i) e[a][i] = 0.0f;
#pragma unroll
  for (int j = 0; j < KS; ++j) {
    const float4 wv = *reinterpret_cast<const float4*>(w + j * 128 + lane * 4);
    unsigned hi[4], lo[4];
    rw_tc_split(wv.x, hi[0], lo[0]);
    rw_tc_split(wv.y, hi[1], lo[1]);
    rw_tc_split(wv.z, hi[2], lo[2]);
    rw_tc_split(wv.w, hi[3], lo[3]);
    rw_mma(e[j & 1], hi, b[j][0], b[j][1]);
    rw_mma(e[2 + (j & 1)], lo, b[j][0], b[j][1]);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = (e[0][i] + e[1][i]) + (e[2][i] + e[3][i]);
}
// D -> the tile's column lane % 16 (every lane calls; lanes 16..31 get lanes 0..15's): y[m] =
// (D[m][0] + D[m][1]) + D[m][2], held by lane 4 (m % 8) as c0 + c1 (m < 8) or c2 + c3 (m >= 8) and
// lane 4 (m % 8) + 1 as c0 (m < 8) or c2 (m >= 8)
__device__ __forceinline__ float rw_tc_out(const float (&d)[4]) {
  const int lane = threadIdx.x & 31, src = (lane & 7) * 4;
  const float top = __shfl_sync(RW_FULL, d[0] + d[1], src) + __shfl_sync(RW_FULL, d[0], src + 1);
  const float bottom = __shfl_sync(RW_FULL, d[2] + d[3], src) + __shfl_sync(RW_FULL, d[2], src + 1);
  return (lane & 8) ? bottom : top;
}
// the named barrier of `count` threads (a tile's k-split warps; id 1..15: __syncthreads is 0)
__device__ __forceinline__ void rw_named_bar(int id, int count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }

// ---- the ring: pieces of the weight image, in consumption order ----
constexpr int kNs = 11, kSlot = 4352, kPieces = 58, kBarSmall = 12, kBarKv = 13, kT = 16;
// piece i: floats [rw_piece_off[i], rw_piece_off[i + 1]) of the image
__constant__ int rw_piece_off[59] = {4068, 8164, 12260, 16356, 20452, 24548, 28644, 32740, 36836, 40932, 45028, 49124, 53220, 57316, 61412, 65508, 69604, 73700, 77796, 81892, 85988, 90084, 94180, 98276, 102372, 106468, 110564, 114660, 118756, 122852, 126948, 131044, 135140, 139236, 143332, 147428, 151524, 155620, 159716, 163812, 167908, 172004, 176100, 180196, 184292, 188388, 192484, 196580, 200676, 204772, 208868, 212964, 217060, 221156, 225252, 229348, 233444, 237540, 240612};
// one thread: piece i's bulk copy into its slot (i % kNs; nothing past the last piece)
__device__ __forceinline__ void rw_issue(float* ring, unsigned long long* bars, const float* img, int i) {
  if (i >= kPieces) return;
  unsigned long long* bar = &bars[i % kNs];
  const unsigned bytes = static_cast<unsigned>(rw_piece_off[i + 1] - rw_piece_off[i]) * 4u;
  rw_expect(bar, bytes);
  rw_bulk(ring + (i % kNs) * kSlot, img + rw_piece_off[i], bytes, bar);
}
// The stages' pieces [A, B) (B - A <= kNs <= 32): A is a compile-time constant, so slot A % kNs and
// copy number A / kNs are constants and piece A + j's slot takes one compare (j < kNs), no division
// at run time (a division by kNs is a dozen instructions on the GEMM threads' path after every
// barrier).
// Lane j of the last warp, before the CTA barrier preceding the stage that reads pieces [A, B):
// waits for piece A + j to land. An mbarrier wait that returns makes the bulk copy's bytes visible
// to the waiting thread, and the barrier orders them before every other thread's reads after it:
// the stage's threads read their slots at once (rw_slot), none waiting on an mbarrier.
template <int A, int B>
__device__ __forceinline__ void rw_prewait(unsigned long long* bars) {
  const int j = static_cast<int>(threadIdx.x) - 480;
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
  const int k = static_cast<int>(threadIdx.x) - 480;
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
// an embedding row's column c: table[id] (an id outside [0, V): NaN)
__device__ __forceinline__ float rw_gather(const float* __restrict__ table, int id, int V, int C, int c) {
  return id < 0 || id >= V ? __int_as_float(0x7fc00000) : __ldg(table + static_cast<long long>(id) * C + c);
}

// ---- cuda_rows_forward: the whole forward as ONE launch of B x T = 2 x 16 CTAs, a cluster of 16 per sequence --------
// CTA t of a cluster owns row t of its sequence; every stage is row-local but the attentions' k, v (pushed
// to the later CTAs). 512 threads per CTA; 222992 B of dynamic shared memory, in floats: the small vectors [0, 4068), the
// activation rows [4068, 5384) (reused by liveness), k and v of the sequence [5384, 7560), the softmax's warp values
// [7560, 7848), 14 mbarriers [7848, 7876), the ring of 11 slots of 17408 B [7876, ...). Weight image: 240612 floats (962448 B; the
// small vectors 4068 floats, then 58 pieces), each CTA streaming 942848 B of weights; 495052 FLOPs per row.
//   stage  0: pointwise embedding pos_embedding add -> embed.out (1, 64)
//   stage  1: layernorm layernorm -> blocks.0.ln1.out (1, 64)
//   stage  2: matmul    matmul -> blocks.0.attn.qkv.out (1, 192), pieces [0, 3)
//   stage  3: attention attention -> blocks.0.attn.out (1, 64)
//   stage  4: matmul    matmul -> blocks.0.mid (1, 64), pieces [3, 4)
//   stage  5: layernorm layernorm -> blocks.0.ln2.out (1, 64)
//   stage  6: matmul    matmul -> blocks.0.mlp.gelu (1, 256), pieces [4, 8)
//   stage  7: matmul    matmul -> blocks.0.out (1, 64), pieces [8, 12)
//   stage  8: layernorm layernorm -> blocks.1.ln1.out (1, 64)
//   stage  9: matmul    matmul -> blocks.1.attn.qkv.out (1, 192), pieces [12, 15)
//   stage 10: attention attention -> blocks.1.attn.out (1, 64)
//   stage 11: matmul    matmul -> blocks.1.mid (1, 64), pieces [15, 16)
//   stage 12: layernorm layernorm -> blocks.1.ln2.out (1, 64)
//   stage 13: matmul    matmul -> blocks.1.mlp.gelu (1, 256), pieces [16, 20)
//   stage 14: matmul    matmul -> blocks.1.out (1, 64), pieces [20, 24)
//   stage 15: layernorm layernorm -> blocks.2.ln1.out (1, 64)
//   stage 16: matmul    matmul -> blocks.2.attn.qkv.out (1, 192), pieces [24, 27)
//   stage 17: attention attention -> blocks.2.attn.out (1, 64)
//   stage 18: matmul    matmul -> blocks.2.mid (1, 64), pieces [27, 28)
//   stage 19: layernorm layernorm -> blocks.2.ln2.out (1, 64)
//   stage 20: matmul    matmul -> blocks.2.mlp.gelu (1, 256), pieces [28, 32)
//   stage 21: matmul    matmul -> blocks.2.out (1, 64), pieces [32, 36)
//   stage 22: layernorm layernorm -> blocks.3.ln1.out (1, 64)
//   stage 23: matmul    matmul -> blocks.3.attn.qkv.out (1, 192), pieces [36, 39)
//   stage 24: attention attention -> blocks.3.attn.out (1, 64)
//   stage 25: matmul    matmul -> blocks.3.mid (1, 64), pieces [39, 40)
//   stage 26: layernorm layernorm -> blocks.3.ln2.out (1, 64)
//   stage 27: matmul    matmul -> blocks.3.mlp.gelu (1, 256), pieces [40, 44)
//   stage 28: matmul    matmul -> blocks.3.out (1, 64), pieces [44, 48)
//   stage 29: layernorm layernorm -> ln_f.out (1, 64)
//   stage 30: matmul    matmul -> logits (1, 611), pieces [48, 58)
//   stage 31: softmax   softmax -> probs (1, 611) (fused into stage 30)
extern "C" __global__ void __launch_bounds__(512, 1) cuda_rows_forward(
    const int* __restrict__ ids,
    const float* __restrict__ wte_weight,
    const float* __restrict__ wpe_weight,
    float* logits,
    float* probs,
    const float* __restrict__ rw_image) {
  extern __shared__ __align__(16) float sm[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int t = static_cast<int>(rw_rank());  // this CTA's row in its sequence
  const long long row = blockIdx.x;          // its row of the batch: b T + t
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(sm + 7848);
  float* ring = sm + 7876;
  (void)lane; (void)row;
  // start: thread 0 initialises the mbarriers behind one fence and puts the small vectors' copy in
  // flight; lanes of warp 0 the ring's first pieces
  if (warp == 0) {
    if (lane == 0) {
      for (int i = 0; i < 14; ++i) rw_bar_init(&bars[i]);
      rw_fence_bar_init();
      rw_expect(&bars[kBarSmall], 16272u);
      rw_bulk(sm, rw_image, 16272u, &bars[kBarSmall]);
    }
    __syncwarp();
    if (lane < kNs) rw_issue(ring, bars, rw_image, lane);
  } else {  // stage 0
    for (int c = tid - 32; c < 64; c += 480) {
      const float v = (rw_gather(wte_weight, ids[row], 611, 64, c) + __ldg(wpe_weight + (t + 0) * 64 + c));
      sm[4068 + c] = v;
    }
  }
  __syncthreads();
  rw_cluster_arrive();  // waited on before the first k, v push: this CTA's mbarriers exist
  {
  // stage 0: embedding pos_embedding add -> 'embed.out' (1, 64); 192 FLOPs per row; sources: embed (wte[ids]); embed (wpe[t]); embed (wte[ids] + wpe[t])
  // (computed by warps 1.. during the start, above)
  }
  {
  // stage 1: layernorm (1, 64) -> 'blocks.0.ln1.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.0.ln1 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  rw_wait(&bars[kBarSmall], 0);  // the small vectors (first use)
  if (warp == 0) rw_layernorm<64>(sm + 4068, sm + 4132, sm + 0, sm + 64, 9.99999975e-06f);
  rw_prewait<0, 3>(bars);  // the last warp: stage 2's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 2: matmul (1, 64) x (192, 64)^T + b -> q kept, k and v pushed to the later CTAs -> 'blocks.0.attn.qkv.out'; 24576 FLOPs and 49152 weight bytes per row (each CTA streams
  //   them: pieces [0, 3) of 64 columns in fragment order); on the tensor cores: 12 tiles of 16 columns, a warp per tile; source: blocks.0.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 12)
  if (warp < 12) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    if (warp + 0 < 12) rw_tc_tile<8>(rw_slot<0>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (warp + 0 < 12) {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15), part = n / 64, c = n % 64;
    const float v = (y + sm[128 + n]);
    const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));  // (every lane: lanes 16.. store nothing)
    if (lane < 16) {
      if (part == 0) {
        sm[4196 + c] = v;
      } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
        float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
        *dst = v;
        for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
      }
    }
  }
  __syncthreads();
  if (tid == 0) rw_kv_arrive(&bars[kBarKv], static_cast<unsigned>(t * 128) * 4u);  // the earlier rows' k and v
  rw_refill<0, 3>(ring, bars, rw_image);  // pieces [0, 3) read: their slots take [11, 14)
  rw_kv_wait(&bars[kBarKv], 0u);
  }
  {
  // stage 3: causal attention, 4 heads of 16, row t over keys 0..t (k, v of the earlier rows from
  //   the earlier CTAs) -> 'blocks.0.attn.out' (1, 64); <= 4096 FLOPs per row; a warp per head; source: blocks.0.attn (cpu::attention_forward)
  if (warp < 4) {
    const int hh = warp, nk = t + 1;
    const float* qt = sm + 4196 + hh * 16;
    const int e = hh * 16 + (lane % 4) * 4;  // lanes < dh / 4: att's columns e..e+3
    const float sc = lane < nk ? rw_dot_qk<16>(qt, sm + 5384 + lane * 68 + hh * 16) * 0.25f : -CUDART_INF_F;
    const float m = rw_warp_max(sc);  // exact: one redux.sync
    const float ex = lane < nk ? expf(sc - m) : 0.0f;
    float sum = ex;
    // the sum of exp over lanes < 16 (keys < T = 16; the lanes above hold 0: adding them changed no value)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
    const float pr = ex * (1.0f / sum);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    // att = probabilities times v in key order, over the 16 keys of the longest row, unrolled: every key's
    // shuffle and v load unconditional (row min(k, nk - 1), a row that is there), only its FMAs under k < nk,
    // so the loads issue ahead of the chain (lanes >= 4 compute columns they do not store)
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float pk = __shfl_sync(RW_FULL, pr, k);
      const float4 vv = *reinterpret_cast<const float4*>(sm + 6472 + min(k, nk - 1) * 68 + e);
      if (k < nk) {
        acc.x = fmaf(pk, vv.x, acc.x); acc.y = fmaf(pk, vv.y, acc.y); acc.z = fmaf(pk, vv.z, acc.z); acc.w = fmaf(pk, vv.w, acc.w);
      }
    }
    if (lane < 4) *reinterpret_cast<float4*>(sm + 4132 + e) = acc;
  }
  rw_prewait<3, 4>(bars);  // the last warp: stage 4's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_cluster_arrive();  // this CTA's k, v are read: the next layer's may come
  }
  {
  // stage 4: matmul (1, 64) x (64, 64)^T + b, + residual -> 'blocks.0.mid'; 8192 FLOPs and 16384 weight bytes per row (each CTA streams
  //   them: pieces [3, 4) of 64 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 2 of the 8 k-steps, their sums added in split order; source: blocks.0.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 2, part 2 + 2) of the tile
    unsigned xb[2][2];
    rw_tc_x<2>(sm + 4132 + part * 16, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<2>(rw_slot<3>(ring, (tile) / 4) + (((tile) % 4) * 8 + part * 2) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[320 + n]) + sm[4068 + n]);
      sm[4196 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<3, 4>(ring, bars, rw_image);  // pieces [3, 4) read: their slots take [14, 15)
  }
  {
  // stage 5: layernorm (1, 64) -> 'blocks.0.ln2.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.0.ln2 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4196, sm + 4132, sm + 384, sm + 448, 9.99999975e-06f);
  rw_prewait<4, 8>(bars);  // the last warp: stage 6's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 6: matmul (1, 64) x (256, 64)^T + b, GELU -> 'blocks.0.mlp.gelu'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [4, 8) of 64 columns in fragment order); on the tensor cores: 16 tiles of 16 columns, a warp per tile; source: blocks.0.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 16)
  if (warp < 16) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    rw_tc_tile<8>(rw_slot<4>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15);
    if (lane < 16 && n < 256) {
      const float v = rw_gelu((y + sm[512 + n]));
      sm[4260 + n] = v;
    }
  }
  rw_prewait<8, 12>(bars);  // the last warp: stage 7's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<4, 8>(ring, bars, rw_image);  // pieces [4, 8) read: their slots take [15, 19)
  }
  {
  // stage 7: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.0.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [8, 12) of 16 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 8 of the 32 k-steps, their sums added in split order; source: blocks.0.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 8, part 8 + 8) of the tile
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4260 + part * 64, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<8>(rw_slot<8>(ring, (tile) / 1) + (((tile) % 1) * 32 + part * 8) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[768 + n]) + sm[4196 + n]);
      sm[4068 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<8, 12>(ring, bars, rw_image);  // pieces [8, 12) read: their slots take [19, 23)
  }
  {
  // stage 8: layernorm (1, 64) -> 'blocks.1.ln1.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.1.ln1 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4068, sm + 4132, sm + 832, sm + 896, 9.99999975e-06f);
  rw_prewait<12, 15>(bars);  // the last warp: stage 9's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 9: matmul (1, 64) x (192, 64)^T + b -> q kept, k and v pushed to the later CTAs -> 'blocks.1.attn.qkv.out'; 24576 FLOPs and 49152 weight bytes per row (each CTA streams
  //   them: pieces [12, 15) of 64 columns in fragment order); on the tensor cores: 12 tiles of 16 columns, a warp per tile; source: blocks.1.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 12)
  if (warp < 12) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    if (warp + 0 < 12) rw_tc_tile<8>(rw_slot<12>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (warp + 0 < 12) {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15), part = n / 64, c = n % 64;
    const float v = (y + sm[960 + n]);
    const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));  // (every lane: lanes 16.. store nothing)
    if (lane < 16) {
      if (part == 0) {
        sm[4260 + c] = v;
      } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
        float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
        *dst = v;
        for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
      }
    }
  }
  __syncthreads();
  if (tid == 0) rw_kv_arrive(&bars[kBarKv], static_cast<unsigned>(t * 128) * 4u);  // the earlier rows' k and v
  rw_refill<12, 15>(ring, bars, rw_image);  // pieces [12, 15) read: their slots take [23, 26)
  rw_kv_wait(&bars[kBarKv], 1u);
  }
  {
  // stage 10: causal attention, 4 heads of 16, row t over keys 0..t (k, v of the earlier rows from
  //   the earlier CTAs) -> 'blocks.1.attn.out' (1, 64); <= 4096 FLOPs per row; a warp per head; source: blocks.1.attn (cpu::attention_forward)
  if (warp < 4) {
    const int hh = warp, nk = t + 1;
    const float* qt = sm + 4260 + hh * 16;
    const int e = hh * 16 + (lane % 4) * 4;  // lanes < dh / 4: att's columns e..e+3
    const float sc = lane < nk ? rw_dot_qk<16>(qt, sm + 5384 + lane * 68 + hh * 16) * 0.25f : -CUDART_INF_F;
    const float m = rw_warp_max(sc);  // exact: one redux.sync
    const float ex = lane < nk ? expf(sc - m) : 0.0f;
    float sum = ex;
    // the sum of exp over lanes < 16 (keys < T = 16; the lanes above hold 0: adding them changed no value)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
    const float pr = ex * (1.0f / sum);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    // att = probabilities times v in key order, over the 16 keys of the longest row, unrolled: every key's
    // shuffle and v load unconditional (row min(k, nk - 1), a row that is there), only its FMAs under k < nk,
    // so the loads issue ahead of the chain (lanes >= 4 compute columns they do not store)
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float pk = __shfl_sync(RW_FULL, pr, k);
      const float4 vv = *reinterpret_cast<const float4*>(sm + 6472 + min(k, nk - 1) * 68 + e);
      if (k < nk) {
        acc.x = fmaf(pk, vv.x, acc.x); acc.y = fmaf(pk, vv.y, acc.y); acc.z = fmaf(pk, vv.z, acc.z); acc.w = fmaf(pk, vv.w, acc.w);
      }
    }
    if (lane < 4) *reinterpret_cast<float4*>(sm + 4324 + e) = acc;
  }
  rw_prewait<15, 16>(bars);  // the last warp: stage 11's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_cluster_arrive();  // this CTA's k, v are read: the next layer's may come
  }
  {
  // stage 11: matmul (1, 64) x (64, 64)^T + b, + residual -> 'blocks.1.mid'; 8192 FLOPs and 16384 weight bytes per row (each CTA streams
  //   them: pieces [15, 16) of 64 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 2 of the 8 k-steps, their sums added in split order; source: blocks.1.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 2, part 2 + 2) of the tile
    unsigned xb[2][2];
    rw_tc_x<2>(sm + 4324 + part * 16, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<2>(rw_slot<15>(ring, (tile) / 4) + (((tile) % 4) * 8 + part * 2) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[1152 + n]) + sm[4068 + n]);
      sm[4388 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<15, 16>(ring, bars, rw_image);  // pieces [15, 16) read: their slots take [26, 27)
  }
  {
  // stage 12: layernorm (1, 64) -> 'blocks.1.ln2.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.1.ln2 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4388, sm + 4452, sm + 1216, sm + 1280, 9.99999975e-06f);
  rw_prewait<16, 20>(bars);  // the last warp: stage 13's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 13: matmul (1, 64) x (256, 64)^T + b, GELU -> 'blocks.1.mlp.gelu'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [16, 20) of 64 columns in fragment order); on the tensor cores: 16 tiles of 16 columns, a warp per tile; source: blocks.1.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 16)
  if (warp < 16) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4452, xb);  // the activation, once per warp
    rw_tc_tile<8>(rw_slot<16>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15);
    if (lane < 16 && n < 256) {
      const float v = rw_gelu((y + sm[1344 + n]));
      sm[4516 + n] = v;
    }
  }
  rw_prewait<20, 24>(bars);  // the last warp: stage 14's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<16, 20>(ring, bars, rw_image);  // pieces [16, 20) read: their slots take [27, 31)
  }
  {
  // stage 14: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.1.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [20, 24) of 16 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 8 of the 32 k-steps, their sums added in split order; source: blocks.1.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 8, part 8 + 8) of the tile
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4516 + part * 64, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<8>(rw_slot<20>(ring, (tile) / 1) + (((tile) % 1) * 32 + part * 8) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[1600 + n]) + sm[4388 + n]);
      sm[4196 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<20, 24>(ring, bars, rw_image);  // pieces [20, 24) read: their slots take [31, 35)
  }
  {
  // stage 15: layernorm (1, 64) -> 'blocks.2.ln1.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.2.ln1 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4196, sm + 4132, sm + 1664, sm + 1728, 9.99999975e-06f);
  rw_prewait<24, 27>(bars);  // the last warp: stage 16's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 16: matmul (1, 64) x (192, 64)^T + b -> q kept, k and v pushed to the later CTAs -> 'blocks.2.attn.qkv.out'; 24576 FLOPs and 49152 weight bytes per row (each CTA streams
  //   them: pieces [24, 27) of 64 columns in fragment order); on the tensor cores: 12 tiles of 16 columns, a warp per tile; source: blocks.2.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 12)
  if (warp < 12) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    if (warp + 0 < 12) rw_tc_tile<8>(rw_slot<24>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (warp + 0 < 12) {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15), part = n / 64, c = n % 64;
    const float v = (y + sm[1792 + n]);
    const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));  // (every lane: lanes 16.. store nothing)
    if (lane < 16) {
      if (part == 0) {
        sm[4260 + c] = v;
      } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
        float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
        *dst = v;
        for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
      }
    }
  }
  __syncthreads();
  if (tid == 0) rw_kv_arrive(&bars[kBarKv], static_cast<unsigned>(t * 128) * 4u);  // the earlier rows' k and v
  rw_refill<24, 27>(ring, bars, rw_image);  // pieces [24, 27) read: their slots take [35, 38)
  rw_kv_wait(&bars[kBarKv], 0u);
  }
  {
  // stage 17: causal attention, 4 heads of 16, row t over keys 0..t (k, v of the earlier rows from
  //   the earlier CTAs) -> 'blocks.2.attn.out' (1, 64); <= 4096 FLOPs per row; a warp per head; source: blocks.2.attn (cpu::attention_forward)
  if (warp < 4) {
    const int hh = warp, nk = t + 1;
    const float* qt = sm + 4260 + hh * 16;
    const int e = hh * 16 + (lane % 4) * 4;  // lanes < dh / 4: att's columns e..e+3
    const float sc = lane < nk ? rw_dot_qk<16>(qt, sm + 5384 + lane * 68 + hh * 16) * 0.25f : -CUDART_INF_F;
    const float m = rw_warp_max(sc);  // exact: one redux.sync
    const float ex = lane < nk ? expf(sc - m) : 0.0f;
    float sum = ex;
    // the sum of exp over lanes < 16 (keys < T = 16; the lanes above hold 0: adding them changed no value)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
    const float pr = ex * (1.0f / sum);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    // att = probabilities times v in key order, over the 16 keys of the longest row, unrolled: every key's
    // shuffle and v load unconditional (row min(k, nk - 1), a row that is there), only its FMAs under k < nk,
    // so the loads issue ahead of the chain (lanes >= 4 compute columns they do not store)
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float pk = __shfl_sync(RW_FULL, pr, k);
      const float4 vv = *reinterpret_cast<const float4*>(sm + 6472 + min(k, nk - 1) * 68 + e);
      if (k < nk) {
        acc.x = fmaf(pk, vv.x, acc.x); acc.y = fmaf(pk, vv.y, acc.y); acc.z = fmaf(pk, vv.z, acc.z); acc.w = fmaf(pk, vv.w, acc.w);
      }
    }
    if (lane < 4) *reinterpret_cast<float4*>(sm + 4324 + e) = acc;
  }
  rw_prewait<27, 28>(bars);  // the last warp: stage 18's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_cluster_arrive();  // this CTA's k, v are read: the next layer's may come
  }
  {
  // stage 18: matmul (1, 64) x (64, 64)^T + b, + residual -> 'blocks.2.mid'; 8192 FLOPs and 16384 weight bytes per row (each CTA streams
  //   them: pieces [27, 28) of 64 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 2 of the 8 k-steps, their sums added in split order; source: blocks.2.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 2, part 2 + 2) of the tile
    unsigned xb[2][2];
    rw_tc_x<2>(sm + 4324 + part * 16, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<2>(rw_slot<27>(ring, (tile) / 4) + (((tile) % 4) * 8 + part * 2) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[1984 + n]) + sm[4196 + n]);
      sm[4068 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<27, 28>(ring, bars, rw_image);  // pieces [27, 28) read: their slots take [38, 39)
  }
  {
  // stage 19: layernorm (1, 64) -> 'blocks.2.ln2.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.2.ln2 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4068, sm + 4452, sm + 2048, sm + 2112, 9.99999975e-06f);
  rw_prewait<28, 32>(bars);  // the last warp: stage 20's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 20: matmul (1, 64) x (256, 64)^T + b, GELU -> 'blocks.2.mlp.gelu'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [28, 32) of 64 columns in fragment order); on the tensor cores: 16 tiles of 16 columns, a warp per tile; source: blocks.2.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 16)
  if (warp < 16) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4452, xb);  // the activation, once per warp
    rw_tc_tile<8>(rw_slot<28>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15);
    if (lane < 16 && n < 256) {
      const float v = rw_gelu((y + sm[2176 + n]));
      sm[4516 + n] = v;
    }
  }
  rw_prewait<32, 36>(bars);  // the last warp: stage 21's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<28, 32>(ring, bars, rw_image);  // pieces [28, 32) read: their slots take [39, 43)
  }
  {
  // stage 21: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.2.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [32, 36) of 16 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 8 of the 32 k-steps, their sums added in split order; source: blocks.2.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 8, part 8 + 8) of the tile
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4516 + part * 64, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<8>(rw_slot<32>(ring, (tile) / 1) + (((tile) % 1) * 32 + part * 8) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[2432 + n]) + sm[4068 + n]);
      sm[4388 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<32, 36>(ring, bars, rw_image);  // pieces [32, 36) read: their slots take [43, 47)
  }
  {
  // stage 22: layernorm (1, 64) -> 'blocks.3.ln1.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.3.ln1 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4388, sm + 4132, sm + 2496, sm + 2560, 9.99999975e-06f);
  rw_prewait<36, 39>(bars);  // the last warp: stage 23's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 23: matmul (1, 64) x (192, 64)^T + b -> q kept, k and v pushed to the later CTAs -> 'blocks.3.attn.qkv.out'; 24576 FLOPs and 49152 weight bytes per row (each CTA streams
  //   them: pieces [36, 39) of 64 columns in fragment order); on the tensor cores: 12 tiles of 16 columns, a warp per tile; source: blocks.3.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 12)
  if (warp < 12) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    if (warp + 0 < 12) rw_tc_tile<8>(rw_slot<36>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (warp + 0 < 12) {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15), part = n / 64, c = n % 64;
    const float v = (y + sm[2624 + n]);
    const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));  // (every lane: lanes 16.. store nothing)
    if (lane < 16) {
      if (part == 0) {
        sm[4260 + c] = v;
      } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
        float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
        *dst = v;
        for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
      }
    }
  }
  __syncthreads();
  if (tid == 0) rw_kv_arrive(&bars[kBarKv], static_cast<unsigned>(t * 128) * 4u);  // the earlier rows' k and v
  rw_refill<36, 39>(ring, bars, rw_image);  // pieces [36, 39) read: their slots take [47, 50)
  rw_kv_wait(&bars[kBarKv], 1u);
  }
  {
  // stage 24: causal attention, 4 heads of 16, row t over keys 0..t (k, v of the earlier rows from
  //   the earlier CTAs) -> 'blocks.3.attn.out' (1, 64); <= 4096 FLOPs per row; a warp per head; source: blocks.3.attn (cpu::attention_forward)
  if (warp < 4) {
    const int hh = warp, nk = t + 1;
    const float* qt = sm + 4260 + hh * 16;
    const int e = hh * 16 + (lane % 4) * 4;  // lanes < dh / 4: att's columns e..e+3
    const float sc = lane < nk ? rw_dot_qk<16>(qt, sm + 5384 + lane * 68 + hh * 16) * 0.25f : -CUDART_INF_F;
    const float m = rw_warp_max(sc);  // exact: one redux.sync
    const float ex = lane < nk ? expf(sc - m) : 0.0f;
    float sum = ex;
    // the sum of exp over lanes < 16 (keys < T = 16; the lanes above hold 0: adding them changed no value)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
    const float pr = ex * (1.0f / sum);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    // att = probabilities times v in key order, over the 16 keys of the longest row, unrolled: every key's
    // shuffle and v load unconditional (row min(k, nk - 1), a row that is there), only its FMAs under k < nk,
    // so the loads issue ahead of the chain (lanes >= 4 compute columns they do not store)
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float pk = __shfl_sync(RW_FULL, pr, k);
      const float4 vv = *reinterpret_cast<const float4*>(sm + 6472 + min(k, nk - 1) * 68 + e);
      if (k < nk) {
        acc.x = fmaf(pk, vv.x, acc.x); acc.y = fmaf(pk, vv.y, acc.y); acc.z = fmaf(pk, vv.z, acc.z); acc.w = fmaf(pk, vv.w, acc.w);
      }
    }
    if (lane < 4) *reinterpret_cast<float4*>(sm + 4324 + e) = acc;
  }
  rw_prewait<39, 40>(bars);  // the last warp: stage 25's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 25: matmul (1, 64) x (64, 64)^T + b, + residual -> 'blocks.3.mid'; 8192 FLOPs and 16384 weight bytes per row (each CTA streams
  //   them: pieces [39, 40) of 64 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 2 of the 8 k-steps, their sums added in split order; source: blocks.3.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 2, part 2 + 2) of the tile
    unsigned xb[2][2];
    rw_tc_x<2>(sm + 4324 + part * 16, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<2>(rw_slot<39>(ring, (tile) / 4) + (((tile) % 4) * 8 + part * 2) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[2816 + n]) + sm[4388 + n]);
      sm[4196 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<39, 40>(ring, bars, rw_image);  // pieces [39, 40) read: their slots take [50, 51)
  }
  {
  // stage 26: layernorm (1, 64) -> 'blocks.3.ln2.out', eps 9.99999975e-06; ~512 FLOPs per row; source: blocks.3.ln2 (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4196, sm + 4452, sm + 2880, sm + 2944, 9.99999975e-06f);
  rw_prewait<40, 44>(bars);  // the last warp: stage 27's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 27: matmul (1, 64) x (256, 64)^T + b, GELU -> 'blocks.3.mlp.gelu'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [40, 44) of 64 columns in fragment order); on the tensor cores: 16 tiles of 16 columns, a warp per tile; source: blocks.3.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[1][4];  // tile warp + 16 j's D (warp-uniform: tiles < 16)
  if (warp < 16) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4452, xb);  // the activation, once per warp
    rw_tc_tile<8>(rw_slot<40>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
  }
  {
    const float y = rw_tc_out(d[0]);  // lanes < 16: column tile 16 + lane
    const int n = warp * 16 + (lane & 15);
    if (lane < 16 && n < 256) {
      const float v = rw_gelu((y + sm[3008 + n]));
      sm[4516 + n] = v;
    }
  }
  rw_prewait<44, 48>(bars);  // the last warp: stage 28's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<40, 44>(ring, bars, rw_image);  // pieces [40, 44) read: their slots take [51, 55)
  }
  {
  // stage 28: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.3.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [44, 48) of 16 columns in fragment order); on the tensor cores: 4 tiles of 16 columns, 4 warps per tile, each 8 of the 32 k-steps, their sums added in split order; source: blocks.3.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 16) {
    const int tile = warp / 4, part = warp % 4;  // k-steps [part 8, part 8 + 8) of the tile
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4516 + part * 64, xb);  // the activation's k-slice, once per warp
    float d[4];
    rw_tc_tile<8>(rw_slot<44>(ring, (tile) / 1) + (((tile) % 1) * 32 + part * 8) * 128, xb, d);
    const float y = rw_tc_out(d);  // lanes < 16: column tile 16 + lane's partial sum
    if (lane < 16 && part > 0) sm[7592 + warp * 16 + lane] = y;
    rw_named_bar(1 + tile, 128);  // the tile's 4 warps: their partial sums written
    const int n = tile * 16 + lane;
    if (part == 0 && lane < 16 && n < 64) {  // the partial sums in split order
      const float v = (((((y + sm[7592 + (warp + 1) * 16 + lane]) + sm[7592 + (warp + 2) * 16 + lane]) + sm[7592 + (warp + 3) * 16 + lane]) + sm[3264 + n]) + sm[4196 + n]);
      sm[4068 + n] = v;
    }
  }
  __syncthreads();
  rw_refill<44, 48>(ring, bars, rw_image);  // pieces [44, 48) read: their slots take [55, 58)
  }
  {
  // stage 29: layernorm (1, 64) -> 'ln_f.out', eps 9.99999975e-06; ~512 FLOPs per row; source: ln_f (cpu::layernorm_forward)
  //   (warp 0; the gain and bias loaded with the row, before the statistics: rw_layernorm)
  if (warp == 0) rw_layernorm<64>(sm + 4068, sm + 4132, sm + 3328, sm + 3392, 9.99999975e-06f);
  rw_prewait<48, 58>(bars);  // the last warp: stage 30's weight pieces have landed (before the barrier)
  __syncthreads();
  }
  {
  // stage 30: matmul (1, 64) x (611, 64)^T + b -> 'logits'; 78208 FLOPs and 156416 weight bytes per row (each CTA streams
  //   them: pieces [48, 58) of 64 columns in fragment order); on the tensor cores: 39 tiles of 16 columns, a warp per tile; source: lm_head (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float d[3][4];  // tile warp + 16 j's D (warp-uniform: tiles < 39)
  if (warp < 16) {
    unsigned xb[8][2];
    rw_tc_x<8>(sm + 4132, xb);  // the activation, once per warp
    rw_tc_tile<8>(rw_slot<48>(ring, (warp) / 4) + (((warp) % 4) * 8 + 0) * 128, xb, d[0]);
    rw_tc_tile<8>(rw_slot<48>(ring, ((warp + 16)) / 4) + ((((warp + 16)) % 4) * 8 + 0) * 128, xb, d[1]);
    if (warp + 32 < 39) rw_tc_tile<8>(rw_slot<48>(ring, ((warp + 32)) / 4) + ((((warp + 32)) % 4) * 8 + 0) * 128, xb, d[2]);
  }
  //   with stage 31's softmax -> 'probs' fused in (its only reader): the logits stay in registers (stored to
  //   global at once), lane l < 16 of warp w holding column (w + 16 j) 16 + l
  float lg[3];
  float mx = -CUDART_INF_F;
  lg[0] = -CUDART_INF_F;
  {
    const float y = rw_tc_out(d[0]);
    const int n = warp * 16 + (lane & 15);
    if (lane < 16 && n < 611) {
      const float v = (y + sm[3456 + n]);
      logits[row * 611 + n] = v; lg[0] = v; mx = fmaxf(mx, v);
    }
  }
  lg[1] = -CUDART_INF_F;
  {
    const float y = rw_tc_out(d[1]);
    const int n = (warp + 16) * 16 + (lane & 15);
    if (lane < 16 && n < 611) {
      const float v = (y + sm[3456 + n]);
      logits[row * 611 + n] = v; lg[1] = v; mx = fmaxf(mx, v);
    }
  }
  lg[2] = -CUDART_INF_F;
  if (warp + 32 < 39) {
    const float y = rw_tc_out(d[2]);
    const int n = (warp + 32) * 16 + (lane & 15);
    if (lane < 16 && n < 611) {
      const float v = (y + sm[3456 + n]);
      logits[row * 611 + n] = v; lg[2] = v; mx = fmaxf(mx, v);
    }
  }
  mx = rw_warp_max(mx);  // the warp's max: one redux.sync (exact)
  if (lane == 0) sm[7560 + warp] = mx;
  __syncthreads();  // the warps' maxima written; every tile's reads of the ring done
  rw_refill<48, 58>(ring, bars, rw_image);  // pieces [48, 58) read: nothing left to stream
  mx = sm[7560];
  for (int w = 1; w < 16; ++w) mx = fmaxf(mx, sm[7560 + w]);  // the row's max, in warp order
  float ev[3], sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    const int c = (warp + 16 * j) * 16 + (lane & 15);
    ev[j] = lane < 16 && c < 611 ? expf(lg[j] - mx) : 0.0f;
    sum += ev[j];
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
  if (lane == 0) sm[7576 + warp] = sum;
  __syncthreads();
  float total = sm[7576];
  for (int w = 1; w < 16; ++w) total += sm[7576 + w];  // the row's sum of exp, in warp order
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    const int c = (warp + 16 * j) * 16 + (lane & 15);
    if (lane < 16 && c < 611) { const float v = ev[j] / total; probs[row * 611 + c] = v; }
  }
  }
  {
  // stage 31: softmax over (1, 611) -> 'probs'; 2444 FLOPs per row; source: probs (cpu::softmax): fused into stage 30 above
  }
}
