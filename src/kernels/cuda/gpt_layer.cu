// Whole-layer kernels (gpt_layer.h). 256 threads a block; every intermediate in shared memory.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gpt_layer.h"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/warp_softmax.cuh"

#include <math_constants.h>

namespace minigpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 2;  // rows per block of proj_mlp and lm_head_softmax
constexpr int kBatch = 16;   // global loads a thread issues before storing them (staged())
constexpr int kKBatch = 32;  // weights a thread loads before using them (gemv_rows)

// store(i, load(i)) for i < n, thread t taking i = t, t + 256, ...: each thread issues up to
// kBatch loads before the first store, so their latencies overlap. (A loop that stores each
// value to shared memory before the next load waits one L2 round trip per element: the compiler
// cannot move a global load above a store it cannot prove does not alias it. The H200 run of
// the first version measured ~14 us per kernel, about 20 such round trips each.)
template <class Load, class Store>
__device__ __forceinline__ void staged(int n, Load load, Store store) {
  for (int base = 0; base < n; base += kBatch * kThreads) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      v[j] = i < n ? load(i) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + static_cast<int>(threadIdx.x);
      if (i < n) store(i, v[j]);
    }
  }
}

// LayerNorm of `rows` rows of C floats in shared memory (stride ld), into out (may be in):
// warp w takes rows w, w + 8, ...; each lane reads its elements before writing them.
__device__ void layernorm_rows(const float* in, float* out, int rows, int C, int ld, const float* w,
                               const float* b, float eps) {
  const int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < rows; r += kWarps) {
    float m, rs;
    warp_row_stats(in + r * ld, C, eps, m, rs);
    __syncwarp();
    for (int c = lane; c < C; c += 32) out[r * ld + c] = (in[r * ld + c] - m) * rs * w[c] + b[c];
  }
}

// acc[r] += sum over k in [k0, k1) of a[r][k] Wt[k][n], in k order; kKBatch weights loaded
// (read-only path) before they are used, so one L2 round trip serves kKBatch of them.
__device__ __forceinline__ void dot_column(const float* a, int lda, const float* __restrict__ Wt, int N,
                                           int n, int k0, int k1, float (&acc)[kRows]) {
  for (int kb = k0; kb < k1; kb += kKBatch) {
    float w[kKBatch];
#pragma unroll
    for (int j = 0; j < kKBatch; ++j) w[j] = kb + j < k1 ? __ldg(Wt + static_cast<int64_t>(kb + j) * N + n) : 0.0f;
#pragma unroll
    for (int j = 0; j < kKBatch; ++j) {
      if (kb + j < k1) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = fmaf(a[r * lda + kb + j], w[j], acc[r]);
      }
    }
  }
}

// out = a (kRows x K, shared, stride lda) times Wt (K x N, global, row-major) plus bias (N, may
// be null): store(r, n, sum + bias[n]) for r < rows (the bias loaded with the weights, not after
// a store). Wide outputs: a thread per column, the whole K. Narrow ones (N < 128): the K
// range split in S = 256 / N slices summed through `part` (256 * kRows floats) in slice order.
template <class Store>
__device__ void gemv_rows(const float* a, int lda, int rows, int K, const float* __restrict__ Wt,
                          int N, const float* __restrict__ bias, float* part, Store store) {
  const int tid = threadIdx.x;
  if (N >= 128) {
    for (int n = tid; n < N; n += kThreads) {
      const float b = bias ? __ldg(bias + n) : 0.0f;
      float acc[kRows] = {};
      dot_column(a, lda, Wt, N, n, 0, K, acc);
      for (int r = 0; r < rows; ++r) store(r, n, acc[r] + b);
    }
    return;
  }
  const int S = kThreads / N, slice = tid / N, n = tid % N;
  if (slice < S) {
    float acc[kRows] = {};
    dot_column(a, lda, Wt, N, n, slice * K / S, (slice + 1) * K / S, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r) part[(slice * kRows + r) * N + n] = acc[r];
  }
  __syncthreads();
  for (int i = tid; i < rows * N; i += kThreads) {
    const int r = i / N, c = i % N;
    const float b = bias ? __ldg(bias + c) : 0.0f;
    float v = 0.0f;
    for (int s = 0; s < S; ++s) v += part[(s * kRows + r) * N + c];
    store(r, c, v + b);
  }
}

// Shared-memory layout of attention_front, in floats.
struct FrontLayout {
  int xs, ws, qs, ks, vs, ss, total;
  __host__ __device__ FrontLayout(int T, int C, int dh, int cap) {
    xs = 0;                            // T x (C+1): x rows, then ln1(x) in place
    ws = xs + T * (C + 1);             // 3dh x (C+1): this head's q, k, v rows of qkv.weight
    qs = ws + 3 * dh * (C + 1);        // T x dh
    ks = qs + T * dh;                  // cap x (dh+1)
    vs = ks + cap * (dh + 1);          // cap x (dh+1)
    ss = vs + cap * (dh + 1);          // T x (cap+1): scores, then probabilities
    total = ss + T * (cap + 1);
  }
};

__global__ void __launch_bounds__(kThreads) attention_front_kernel(AttentionFront a, int T, int C,
                                                                  int NH, int cap, int V, int P,
                                                                  float scale) {
  extern __shared__ float sm[];
  const int h = blockIdx.x, b = blockIdx.y, dh = C / NH, tid = threadIdx.x;
  const FrontLayout L(T, C, dh, cap);
  float *xs = sm + L.xs, *ws = sm + L.ws, *qs = sm + L.qs, *ks = sm + L.ks, *vs = sm + L.vs,
        *ss = sm + L.ss;
  const int pos0 = a.pos ? *a.pos : 0;
  float* att = a.att + static_cast<int64_t>(b) * T * C + h * dh;
  if (pos0 < 0 || pos0 + T > cap) {  // the host checks first; never write outside the cache
    for (int i = tid; i < T * dh; i += kThreads) att[(i / dh) * C + i % dh] = CUDART_NAN_F;
    return;
  }
  // x rows (or their embedding), this head's 3 dh weight rows, and the earlier positions' k
  // and v (a decode step's cache; none in a forward from position 0)
  const int64_t row0 = static_cast<int64_t>(b) * T;
  if (a.ids) {
    staged(
        T * C,
        [&](int i) {
          const int t = i / C, c = i % C, id = a.ids[row0 + t], p = pos0 + t;
          return (id < 0 || id >= V || p >= P)
                     ? CUDART_NAN_F
                     : a.wte[static_cast<int64_t>(id) * C + c] + a.wpe[static_cast<int64_t>(p) * C + c];
        },
        [&](int i, float v) {
          xs[(i / C) * (C + 1) + i % C] = v;
          if (h == 0) a.x_out[row0 * C + i] = v;
        });
  } else {
    staged(T * C, [&](int i) { return a.x[row0 * C + i]; },
           [&](int i, float v) { xs[(i / C) * (C + 1) + i % C] = v; });
  }
  staged(
      3 * dh * C,
      [&](int i) {
        const int j = i / C, c = i % C;
        return __ldg(a.qkv_weight + static_cast<int64_t>((j / dh) * C + h * dh + j % dh) * C + c);
      },
      [&](int i, float v) { ws[(i / C) * (C + 1) + i % C] = v; });
  const int old = pos0 * dh;  // k rows then v rows
  staged(
      2 * old,
      [&](int i) {
        const int e = i < old ? i : i - old, p = e / dh, d = e % dh;
        const float* cache = i < old ? a.k_cache : a.v_cache;
        return cache[(static_cast<int64_t>(b) * cap + p) * C + h * dh + d];
      },
      [&](int i, float v) {
        const int e = i < old ? i : i - old;
        (i < old ? ks : vs)[(e / dh) * (dh + 1) + e % dh] = v;
      });
  __syncthreads();
  layernorm_rows(xs, xs, T, C, C + 1, a.ln_weight, a.ln_bias, a.ln_eps);
  __syncthreads();
  // q, k, v of the new rows: q to shared memory, k and v to the cache
  for (int o = tid; o < T * 3 * dh; o += kThreads) {
    const int t = o / (3 * dh), j = o % (3 * dh), part = j / dh, jj = j % dh;
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s = fmaf(xs[t * (C + 1) + c], ws[j * (C + 1) + c], s);
    s += a.qkv_bias[part * C + h * dh + jj];
    if (part == 0) {
      qs[t * dh + jj] = s;
    } else {  // to the cache for later steps, and to shared memory for this one
      float* cache = part == 1 ? a.k_cache : a.v_cache;
      cache[(static_cast<int64_t>(b) * cap + pos0 + t) * C + h * dh + jj] = s;
      (part == 1 ? ks : vs)[(pos0 + t) * (dh + 1) + jj] = s;
    }
  }
  const int keys = pos0 + T;
  __syncthreads();
  // scores of query t against keys p <= pos0 + t (the rest is masked: never computed)
  for (int i = tid; i < T * keys; i += kThreads) {
    const int t = i / keys, p = i % keys;
    if (p > pos0 + t) continue;
    float s = 0.0f;
    for (int d = 0; d < dh; ++d) s = fmaf(qs[t * dh + d], ks[p * (dh + 1) + d], s);
    ss[t * (cap + 1) + p] = s * scale;
  }
  __syncthreads();
  // softmax of each query's row, a warp per row
  for (int t = tid >> 5; t < T; t += kWarps) warp_softmax_inplace(ss + t * (cap + 1), pos0 + t + 1);
  __syncthreads();
  for (int i = tid; i < T * dh; i += kThreads) {
    const int t = i / dh, d = i % dh, n = pos0 + t + 1;
    float s = 0.0f;
    for (int p = 0; p < n; ++p) s = fmaf(ss[t * (cap + 1) + p], vs[p * (dh + 1) + d], s);
    att[t * C + d] = s;
  }
}

__global__ void __launch_bounds__(kThreads) proj_mlp_kernel(ProjMlp p, int M, int C, int F) {
  extern __shared__ float sm[];
  float* att = sm;              // kRows x C
  float* x = att + kRows * C;   // kRows x C
  float* ln = x + kRows * C;    // kRows x C
  float* hid = ln + kRows * C;  // kRows x F
  float* part = hid + kRows * F;  // kThreads x kRows
  const int m0 = blockIdx.x * kRows, rows = min(kRows, M - m0), tid = threadIdx.x;
  const int n = kRows * C;  // att rows then x rows; rows past M are zeros
  staged(
      2 * n,
      [&](int i) {
        const int e = i < n ? i : i - n;
        return e / C < rows ? (i < n ? p.att : p.x)[static_cast<int64_t>(m0) * C + e] : 0.0f;
      },
      [&](int i, float v) { att[i] = v; });  // x follows att in shared memory
  __syncthreads();
  // x = (att proj^T + b) + x: each (r, n) read and written by one thread (the CPU's order)
  gemv_rows(att, C, rows, C, p.proj_wt, C, p.proj_bias, part,
            [&](int r, int n, float v) { x[r * C + n] = v + x[r * C + n]; });
  __syncthreads();
  layernorm_rows(x, ln, rows, C, C, p.ln_weight, p.ln_bias, p.ln_eps);
  __syncthreads();
  gemv_rows(ln, C, rows, C, p.fc1_wt, F, p.fc1_bias, part,
            [&](int r, int n, float v) { hid[r * F + n] = gelu_erf(v); });
  __syncthreads();
  gemv_rows(hid, F, rows, F, p.fc2_wt, C, p.fc2_bias, part,
            [&](int r, int n, float v) { x[r * C + n] = v + x[r * C + n]; });
  __syncthreads();
  for (int i = tid; i < rows * C; i += kThreads) p.x[static_cast<int64_t>(m0) * C + i] = x[i];
}

__global__ void __launch_bounds__(kThreads) lm_head_softmax_kernel(
    const float* xg, const float* ln_w, const float* ln_b, float eps, const float* Wt,
    const float* bias, float* logits, float* probs, int M, int C, int V) {
  extern __shared__ float sm[];
  float* x = sm;                // kRows x C
  float* ln = x + kRows * C;    // kRows x C
  float* part = ln + kRows * C;  // kThreads x kRows (V < 128: the k-sliced sums)
  const int m0 = blockIdx.x * kRows, rows = min(kRows, M - m0), tid = threadIdx.x;
  staged(
      kRows * C, [&](int i) { return i / C < rows ? xg[static_cast<int64_t>(m0) * C + i] : 0.0f; },
      [&](int i, float v) { x[i] = v; });
  __syncthreads();
  layernorm_rows(x, ln, kRows, C, C, ln_w, ln_b, eps);
  __syncthreads();
  gemv_rows(ln, C, rows, C, Wt, V, bias, part,
            [&](int r, int n, float v) { logits[static_cast<int64_t>(m0 + r) * V + n] = v; });
  if (!probs) return;
  __syncthreads();  // this block's logits are visible to it
  const int lane = tid & 31;
  for (int r = tid >> 5; r < rows; r += kWarps) {
    const float* row = logits + static_cast<int64_t>(m0 + r) * V;
    float* out = probs + static_cast<int64_t>(m0 + r) * V;
    // Three passes over the row (max, sum, write), each lane taking n = lane, lane + 32, ... in
    // batches of kBatch loads issued together (a loop of single loads waits for each one).
    // A NaN passes fmaxf but makes the sum NaN, so the row is NaN; +inf gives inf - inf = NaN.
    float v[kBatch];
    auto load = [&](int n0) {
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = n0 + 32 * j < V ? row[n0 + 32 * j] : -CUDART_INF_F;
    };
    float m = -CUDART_INF_F;
    for (int n0 = lane; n0 < V; n0 += 32 * kBatch) {
      load(n0);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) m = fmaxf(m, v[j]);
    }
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float sum = 0.0f;
    for (int n0 = lane; n0 < V; n0 += 32 * kBatch) {
      load(n0);
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (n0 + 32 * j < V) sum += expf(v[j] - m);
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = 1.0f / sum;
    for (int n0 = lane; n0 < V; n0 += 32 * kBatch) {
      load(n0);  // before the stores: out and row may alias as far as the compiler knows
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (n0 + 32 * j < V) out[n0 + 32 * j] = expf(v[j] - m) * inv;
    }
  }
}

int optin_smem() {
  int dev = 0, bytes = 48 * 1024;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  MINIGPT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what) {
  MINIGPT_CUDA_REQUIRE(bytes <= static_cast<size_t>(optin_smem()), what, ": needs ", bytes,
                       " bytes of shared memory, more than the device's ", optin_smem());
  if (bytes > 48 * 1024)
    MINIGPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
}

size_t proj_mlp_smem(int64_t C, int64_t F) {
  return static_cast<size_t>(kRows * (3 * C + F) + kThreads * kRows) * sizeof(float);
}
size_t lm_head_smem(int64_t C) { return static_cast<size_t>(kRows * 2 * C + kThreads * kRows) * sizeof(float); }

}  // namespace

size_t attention_front_smem(int64_t T, int64_t C, int64_t NH, int64_t capacity) {
  const FrontLayout L(static_cast<int>(T), static_cast<int>(C), static_cast<int>(C / NH),
                      static_cast<int>(capacity));
  return static_cast<size_t>(L.total) * sizeof(float);
}

bool gpt_layer_fits(int64_t T, int64_t C, int64_t NH, int64_t F, int64_t capacity) {
  if (C < 1 || NH < 1 || C % NH != 0 || T < 1 || T > capacity || capacity > 4096 || C > 4096) return false;
  const size_t limit = static_cast<size_t>(optin_smem());
  return attention_front_smem(T, C, NH, capacity) <= limit && proj_mlp_smem(C, F) <= limit &&
         lm_head_smem(C) <= limit;
}

void attention_front(const AttentionFront& a, int64_t B, int64_t T, int64_t C, int64_t NH,
                     int64_t capacity, int64_t V, int64_t P, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(B >= 0 && T >= 1 && T <= capacity && capacity <= 4096,
                       "attention_front: bad shape B=", B, " T=", T, " capacity=", capacity);
  MINIGPT_CUDA_REQUIRE(C >= 1 && NH >= 1 && C % NH == 0 && C <= 4096, "attention_front: C=", C,
                       " is not a multiple of NH=", NH);
  if (B == 0) return;
  MINIGPT_CUDA_REQUIRE(B <= 65535, "attention_front: B=", B, " too large");
  MINIGPT_CUDA_REQUIRE((a.ids ? a.wte && a.wpe && a.x_out : a.x != nullptr) && a.ln_weight &&
                           a.ln_bias && a.qkv_weight && a.qkv_bias && a.k_cache && a.v_cache && a.att,
                       "attention_front: null pointer");
  const size_t smem = attention_front_smem(T, C, NH, capacity);
  allow_smem(attention_front_kernel, smem, "attention_front");
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  attention_front_kernel<<<dim3(static_cast<unsigned>(NH), static_cast<unsigned>(B)), kThreads, smem, stream>>>(
      a, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH), static_cast<int>(capacity),
      static_cast<int>(V), static_cast<int>(P), scale);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void proj_mlp(const ProjMlp& p, int64_t M, int64_t C, int64_t F, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(M >= 0 && C >= 1 && F >= 1 && C <= 4096 && F <= 16384, "proj_mlp: bad shape M=", M,
                       " C=", C, " F=", F);
  if (M == 0) return;
  MINIGPT_CUDA_REQUIRE(p.att && p.x && p.proj_wt && p.proj_bias && p.ln_weight && p.ln_bias && p.fc1_wt &&
                           p.fc1_bias && p.fc2_wt && p.fc2_bias,
                       "proj_mlp: null pointer");
  const size_t smem = proj_mlp_smem(C, F);
  allow_smem(proj_mlp_kernel, smem, "proj_mlp");
  proj_mlp_kernel<<<static_cast<unsigned>((M + kRows - 1) / kRows), kThreads, smem, stream>>>(
      p, static_cast<int>(M), static_cast<int>(C), static_cast<int>(F));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void lm_head_softmax(const float* x, const float* ln_weight, const float* ln_bias, float ln_eps,
                     const float* lm_wt, const float* lm_bias, float* logits, float* probs,
                     int64_t M, int64_t C, int64_t V, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(M >= 0 && C >= 1 && C <= 4096 && V >= 1 && V <= (int64_t{1} << 24),
                       "lm_head_softmax: bad shape M=", M, " C=", C, " V=", V);
  if (M == 0) return;
  MINIGPT_CUDA_REQUIRE(x && ln_weight && ln_bias && lm_wt && lm_bias && logits, "lm_head_softmax: null pointer");
  const size_t smem = lm_head_smem(C);
  allow_smem(lm_head_softmax_kernel, smem, "lm_head_softmax");
  lm_head_softmax_kernel<<<static_cast<unsigned>((M + kRows - 1) / kRows), kThreads, smem, stream>>>(
      x, ln_weight, ln_bias, ln_eps, lm_wt, lm_bias, logits, probs, static_cast<int>(M), static_cast<int>(C),
      static_cast<int>(V));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
