// gpt_mega.h's device-resident decode loop (gpt_mega_generate): one launch of the decode step's
// cluster feeds a token and then every token it chooses itself. Built from gpt_mega_parts.cuh's
// pieces, as gpt_mega.cu's decode step.
#include "kernels/cuda/gpt_mega_parts.cuh"

namespace minigpt::cuda {
namespace {

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
// variance in double in ONE pass as layernorm_rows_t (the sum and the sum of squares, a
// butterfly each, side by side; 1/C as a product, exact for C a power of two; 1/sigma by a float
// rsqrtf of the double variance: row_stats), over 32 lanes instead of 16 (the decode stage
// timestamps, against the two-pass form before: ~1k -> ~0.4k cycles per LayerNorm, 9 per token).
// The sums over 32 lanes differ from the 16-lane ones in double's last bits: the floats the same
// (the test: the loop's logits are the step's, 0 apart) or within an ulp.
template <int KC>
__device__ __forceinline__ void warp_layernorm(const float (&v)[KC / 32], float* out, const float* w, const float* b,
                                               float eps) {
  static_assert(KC > 0 && KC % 32 == 0, "one warp, KC / 32 values per lane");
  constexpr int E = KC / 32;
  const int lane = threadIdx.x & 31;
  const float2 st = row_stats<32, E>(v, KC, eps);  // (mean, 1/sigma)
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int cc = lane + 32 * e;
    out[cc] = (v[e] - st.x) * st.y * w[cc] + b[cc];
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

}  // namespace

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
