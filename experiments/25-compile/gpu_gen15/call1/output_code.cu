// graph gpt_B2_T16 (0826be997856d8a1): the rows form (codegen_cuda_rows.h)
// (its default text: the hand-written gpt_mega_rows.cu's variants ported, the same values bitwise as the
// plain text, MINIGPT_CUDA_VARIANT=rows-plain: the LayerNorm's gain and bias loaded with the row, the
// attention's max by redux.sync and its key loop unrolled, rw_dot's k loop unrolled, every matmul's
// pieces waited for by the last warp before the barrier preceding it, ring slots without divisions)
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
// unrolled, so the later float4 loads issue while the chain runs (unrolled by 4, each 4 steps'
// loads waited for the previous chain); the same FMAs in the same order
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
// the variance E[x^2] - mean^2 clamped at 0, 1/sigma a float rsqrtf (gpt_mega_parts.cuh's
// row_stats, the same arithmetic). The gain and bias are loaded WITH the row, before the
// statistics: loaded after them, each w[c], b[c] may wait for the previous element's store where
// the compiler cannot tell the pointers apart (the hand-written kernel's case; here the offsets
// are constants from one base, and the plain text's sm_90a code already loads them early: this
// keeps it so without relying on that)
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

// ---- the ring: pieces of the weight image, in consumption order ----
constexpr int kNs = 11, kSlot = 4352, kPieces = 58, kBarSmall = 12, kBarKv = 13, kT = 16;
// piece i: floats [rw_piece_off[i], rw_piece_off[i + 1]) of the image
__constant__ int rw_piece_off[59] = {4068, 8420, 12772, 17124, 21476, 25828, 30180, 34532, 38884, 43044, 47204, 51364, 55524, 59876, 64228, 68580, 72932, 77284, 81636, 85988, 90340, 94500, 98660, 102820, 106980, 111332, 115684, 120036, 124388, 128740, 133092, 137444, 141796, 145956, 150116, 154276, 158436, 162788, 167140, 171492, 175844, 180196, 184548, 188900, 193252, 197412, 201572, 205732, 209892, 214244, 218596, 222948, 227300, 231652, 236004, 240356, 244708, 249060, 251440};
// one thread: piece i's bulk copy into its slot (i % kNs; nothing past the last piece)
__device__ __forceinline__ void rw_issue(float* ring, unsigned long long* bars, const float* img, int i) {
  if (i >= kPieces) return;
  unsigned long long* bar = &bars[i % kNs];
  const unsigned bytes = static_cast<unsigned>(rw_piece_off[i + 1] - rw_piece_off[i]) * 4u;
  rw_expect(bar, bytes);
  rw_bulk(ring + (i % kNs) * kSlot, img + rw_piece_off[i], bytes, bar);
}
// piece i's slot, once it has landed (phase (i / kNs) & 1 of the slot's mbarrier)
__device__ __forceinline__ const float* rw_piece(float* ring, unsigned long long* bars, int i) {
  rw_wait(&bars[i % kNs], static_cast<unsigned>((i / kNs) & 1));
  return ring + (i % kNs) * kSlot;
}
// The stages' pieces [A, B) (B - A <= kNs <= 32): A is a compile-time constant, so slot A % kNs and
// copy number A / kNs are constants and piece A + j's slot takes one compare (j < kNs), no division
// at run time (gpt_mega_rows.cu's kVarSlots; a division by kNs is a dozen instructions on the GEMM
// threads' path after every barrier).
// Lane j of the last warp, before the CTA barrier preceding the stage that reads pieces [A, B):
// waits for piece A + j to land (gpt_mega_rows.cu's prewait). An mbarrier wait that returns makes
// the bulk copy's bytes visible to the waiting thread, and the barrier orders them before every
// other thread's reads after it: the stage's threads read their slots at once (rw_slot).
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
// to the later CTAs). 512 threads per CTA; 221968 B of dynamic shared memory, in floats: the small vectors [0, 4068), the
// activation rows [4068, 5384) (reused by liveness), k and v of the sequence [5384, 7560), the softmax's warp values
// [7560, 7592), 14 mbarriers [7592, 7620), the ring of 11 slots of 17408 B [7620, ...). Weight image: 251440 floats (1005760 B; the
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
//   stage 31: softmax   softmax -> probs (1, 611)
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
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(sm + 7592);
  float* ring = sm + 7620;
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
  //   them: pieces [0, 3) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.0.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float acc_kv[1];
  if (tid < 192) rw_dot<64, 1>(sm + 4132, {rw_slot<0>(ring, tid / 64) + (tid % 64) * 68}, acc_kv);
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (tid < 192) {
    const int part = tid / 64, c = tid % 64;
    const float v = (acc_kv[0] + sm[128 + tid]);
    if (part == 0) {
      sm[4196 + c] = v;
    } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
      float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
      *dst = v;
      const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));
      for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
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
  //   them: pieces [3, 4) of 64 rows, rows 68 floats apart); 4 lanes per output, each a k-slice of 16, the slices added in order; source: blocks.0.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<16, 1>(sm + 4132 + s * 16, {rw_slot<3>(ring, n / 64) + (n % 64) * 68 + s * 16}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[320 + n]) + sm[4068 + n]);
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
  //   them: pieces [4, 8) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.0.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (tid < 256) {
    const float* w0 = rw_slot<4>(ring, tid / 64) + (tid % 64) * 68;
    float acc[1];
    rw_dot<64, 1>(sm + 4132, {w0}, acc);
    {
      const int n = tid;
      if (n < 256) {
        const float v = rw_gelu((acc[0] + sm[512 + n]));
        sm[4260 + n] = v; 
      }
    }
  }
  rw_prewait<8, 12>(bars);  // the last warp: stage 7's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<4, 8>(ring, bars, rw_image);  // pieces [4, 8) read: their slots take [15, 19)
  }
  {
  // stage 7: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.0.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [8, 12) of 16 rows, rows 260 floats apart); 4 lanes per output, each a k-slice of 64, the slices added in order; source: blocks.0.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<64, 1>(sm + 4260 + s * 64, {rw_slot<8>(ring, n / 16) + (n % 16) * 260 + s * 64}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[768 + n]) + sm[4196 + n]);
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
  //   them: pieces [12, 15) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.1.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float acc_kv[1];
  if (tid < 192) rw_dot<64, 1>(sm + 4132, {rw_slot<12>(ring, tid / 64) + (tid % 64) * 68}, acc_kv);
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (tid < 192) {
    const int part = tid / 64, c = tid % 64;
    const float v = (acc_kv[0] + sm[960 + tid]);
    if (part == 0) {
      sm[4260 + c] = v;
    } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
      float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
      *dst = v;
      const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));
      for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
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
  //   them: pieces [15, 16) of 64 rows, rows 68 floats apart); 4 lanes per output, each a k-slice of 16, the slices added in order; source: blocks.1.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<16, 1>(sm + 4324 + s * 16, {rw_slot<15>(ring, n / 64) + (n % 64) * 68 + s * 16}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[1152 + n]) + sm[4068 + n]);
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
  //   them: pieces [16, 20) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.1.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (tid < 256) {
    const float* w0 = rw_slot<16>(ring, tid / 64) + (tid % 64) * 68;
    float acc[1];
    rw_dot<64, 1>(sm + 4452, {w0}, acc);
    {
      const int n = tid;
      if (n < 256) {
        const float v = rw_gelu((acc[0] + sm[1344 + n]));
        sm[4516 + n] = v; 
      }
    }
  }
  rw_prewait<20, 24>(bars);  // the last warp: stage 14's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<16, 20>(ring, bars, rw_image);  // pieces [16, 20) read: their slots take [27, 31)
  }
  {
  // stage 14: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.1.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [20, 24) of 16 rows, rows 260 floats apart); 4 lanes per output, each a k-slice of 64, the slices added in order; source: blocks.1.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<64, 1>(sm + 4516 + s * 64, {rw_slot<20>(ring, n / 16) + (n % 16) * 260 + s * 64}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[1600 + n]) + sm[4388 + n]);
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
  //   them: pieces [24, 27) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.2.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float acc_kv[1];
  if (tid < 192) rw_dot<64, 1>(sm + 4132, {rw_slot<24>(ring, tid / 64) + (tid % 64) * 68}, acc_kv);
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (tid < 192) {
    const int part = tid / 64, c = tid % 64;
    const float v = (acc_kv[0] + sm[1792 + tid]);
    if (part == 0) {
      sm[4260 + c] = v;
    } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
      float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
      *dst = v;
      const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));
      for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
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
  //   them: pieces [27, 28) of 64 rows, rows 68 floats apart); 4 lanes per output, each a k-slice of 16, the slices added in order; source: blocks.2.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<16, 1>(sm + 4324 + s * 16, {rw_slot<27>(ring, n / 64) + (n % 64) * 68 + s * 16}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[1984 + n]) + sm[4196 + n]);
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
  //   them: pieces [28, 32) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.2.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (tid < 256) {
    const float* w0 = rw_slot<28>(ring, tid / 64) + (tid % 64) * 68;
    float acc[1];
    rw_dot<64, 1>(sm + 4452, {w0}, acc);
    {
      const int n = tid;
      if (n < 256) {
        const float v = rw_gelu((acc[0] + sm[2176 + n]));
        sm[4516 + n] = v; 
      }
    }
  }
  rw_prewait<32, 36>(bars);  // the last warp: stage 21's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<28, 32>(ring, bars, rw_image);  // pieces [28, 32) read: their slots take [39, 43)
  }
  {
  // stage 21: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.2.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [32, 36) of 16 rows, rows 260 floats apart); 4 lanes per output, each a k-slice of 64, the slices added in order; source: blocks.2.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<64, 1>(sm + 4516 + s * 64, {rw_slot<32>(ring, n / 16) + (n % 16) * 260 + s * 64}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[2432 + n]) + sm[4068 + n]);
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
  //   them: pieces [36, 39) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.3.attn.qkv (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  float acc_kv[1];
  if (tid < 192) rw_dot<64, 1>(sm + 4132, {rw_slot<36>(ring, tid / 64) + (tid % 64) * 68}, acc_kv);
  rw_cluster_wait();  // every CTA of the cluster has read the previous attention's k, v (the first: runs)
  if (tid < 192) {
    const int part = tid / 64, c = tid % 64;
    const float v = (acc_kv[0] + sm[2624 + tid]);
    if (part == 0) {
      sm[4260 + c] = v;
    } else {  // lane 4j sends columns 4j..4j+3 to every later CTA as one 16-byte st.async
      float* dst = sm + (part == 1 ? 5384 : 6472) + t * 68 + c;
      *dst = v;
      const float4 v4 = make_float4(v, __shfl_down_sync(RW_FULL, v, 1), __shfl_down_sync(RW_FULL, v, 2), __shfl_down_sync(RW_FULL, v, 3));
      for (int q = t + 1; q < kT && lane % 4 == 0; ++q) rw_st_async4(rw_mapa(dst, q), v4, rw_mapa(&bars[kBarKv], q));
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
  //   them: pieces [39, 40) of 64 rows, rows 68 floats apart); 4 lanes per output, each a k-slice of 16, the slices added in order; source: blocks.3.attn.proj (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<16, 1>(sm + 4324 + s * 16, {rw_slot<39>(ring, n / 64) + (n % 64) * 68 + s * 16}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[2816 + n]) + sm[4388 + n]);
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
  //   them: pieces [40, 44) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: blocks.3.mlp.fc1 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (tid < 256) {
    const float* w0 = rw_slot<40>(ring, tid / 64) + (tid % 64) * 68;
    float acc[1];
    rw_dot<64, 1>(sm + 4452, {w0}, acc);
    {
      const int n = tid;
      if (n < 256) {
        const float v = rw_gelu((acc[0] + sm[3008 + n]));
        sm[4516 + n] = v; 
      }
    }
  }
  rw_prewait<44, 48>(bars);  // the last warp: stage 28's weight pieces have landed (before the barrier)
  __syncthreads();
  rw_refill<40, 44>(ring, bars, rw_image);  // pieces [40, 44) read: their slots take [51, 55)
  }
  {
  // stage 28: matmul (1, 256) x (64, 256)^T + b, + residual -> 'blocks.3.out'; 32768 FLOPs and 65536 weight bytes per row (each CTA streams
  //   them: pieces [44, 48) of 16 rows, rows 260 floats apart); 4 lanes per output, each a k-slice of 64, the slices added in order; source: blocks.3.mlp.fc2 (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (warp < 8) {
    const int n = 8 * warp + (lane % 8), s = lane / 8;
    float acc[1] = {0.0f};
    if (n < 64) rw_dot<64, 1>(sm + 4516 + s * 64, {rw_slot<44>(ring, n / 16) + (n % 16) * 260 + s * 64}, acc);
    const float p1 = __shfl_down_sync(RW_FULL, acc[0], 8);
    const float p2 = __shfl_down_sync(RW_FULL, acc[0], 16);
    const float p3 = __shfl_down_sync(RW_FULL, acc[0], 24);
    if (s == 0 && n < 64) {
      const float v = (((((acc[0] + p1) + p2) + p3) + sm[3264 + n]) + sm[4196 + n]);
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
  //   them: pieces [48, 58) of 64 rows, rows 68 floats apart); a thread per output, one chain over k; source: lm_head (cpu::linear_forward_packed)
  //   (its pieces waited for by the last warp before the barrier above: read at once, no mbarrier wait)
  if (tid < 611) {
    const float* w0 = rw_slot<48>(ring, tid / 64) + (tid % 64) * 68;
    float acc[2];
    rw_dot<64, 2>(sm + 4132, {w0, (tid + 512) < 611 ? rw_slot<48>(ring, (tid + 512) / 64) + ((tid + 512) % 64) * 68 : w0}, acc);
    {
      const int n = tid;
      if (n < 611) {
        const float v = (acc[0] + sm[3456 + n]);
        sm[4772 + n] = v; logits[row * 611 + n] = v;
      }
    }
    {
      const int n = (tid + 512);
      if (n < 611) {
        const float v = (acc[1] + sm[3456 + n]);
        sm[4772 + n] = v; logits[row * 611 + n] = v;
      }
    }
  }
  __syncthreads();
  rw_refill<48, 58>(ring, bars, rw_image);  // pieces [48, 58) read: nothing left to stream
  }
  {
  // stage 31: softmax over (1, 611) -> 'probs': the max and the sum of exp over the CTA (warp butterflies, the
  //   warps' values in warp order), then exp / sum; 2444 FLOPs per row; source: probs (cpu::softmax)
  {
    const float* in = sm + 4772;
    float mx = -CUDART_INF_F, ev[2], sum = 0.0f;
    for (int j = 0; j < 2; ++j) if (tid + j * 512 < 611) mx = fmaxf(mx, in[tid + j * 512]);
    mx = rw_warp_max(mx);  // the warp's max: one redux.sync (exact)
    if (lane == 0) sm[7560 + warp] = mx;
    __syncthreads();
    mx = sm[7560];
    for (int w = 1; w < 16; ++w) mx = fmaxf(mx, sm[7560 + w]);
    for (int j = 0; j < 2; ++j) { ev[j] = tid + j * 512 < 611 ? expf(in[tid + j * 512] - mx) : 0.0f; sum += ev[j]; }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);
    if (lane == 0) sm[7576 + warp] = sum;
    __syncthreads();
    float total = sm[7576];
    for (int w = 1; w < 16; ++w) total += sm[7576 + w];
    for (int j = 0; j < 2; ++j) {
      const int c = tid + j * 512;
      if (c < 611) { const float v = ev[j] / total; probs[row * 611 + c] = v; }
    }
  }
  }
}
