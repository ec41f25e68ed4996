// Causal self-attention on the GPU (attention.h), fused per head.
//
// attention_forward: block = (b, h, a tile of 64 queries), one thread per query. Keys and values
// of the head stream through shared memory in tiles of 64 rows; each thread keeps its q, its
// running max, sum and output (dh floats) in registers and updates them with an online
// softmax (rescaling when the max grows), so no score leaves the chip. Scores use expf; the
// result equals the CPU's explicit softmax to float rounding.
//
// attention_decode: one block; the new k and v are stored into cache row *pos first, then
// warp h handles head h: each lane an online softmax over positions lane, lane + 32, ... <= pos,
// then the lanes' (max, sum, output) are merged across the warp.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"

#include <math_constants.h>

namespace minigpt::cuda {
namespace {

constexpr int kQueries = 64;  // queries per block (threads)
constexpr int kKeys = 64;     // keys per shared-memory tile

// One online-softmax update with score s and value row v (DH floats).
template <int DH>
__device__ __forceinline__ void online_update(float s, const float* v, float& m, float& l,
                                              float (&acc)[DH]) {
  if (s > m) {  // the max grows: rescale what was summed so far (exp(-inf) = 0 at the start)
    const float corr = expf(m - s);
    l *= corr;
#pragma unroll
    for (int d = 0; d < DH; ++d) acc[d] *= corr;
    m = s;
  }
  const float p = expf(s - m);  // NaN scores propagate: s > m is false, p is NaN
  l += p;
#pragma unroll
  for (int d = 0; d < DH; ++d) acc[d] = fmaf(p, v[d], acc[d]);
}

template <int DH>
__global__ void __launch_bounds__(kQueries) attention_forward_kernel(const float* qkv, float* out,
                                                                     float* lse, int T, int C,
                                                                     int NH, float scale) {
  __shared__ float ks[kKeys][DH];
  __shared__ float vs[kKeys][DH];
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int t1 = blockIdx.y * kQueries + threadIdx.x;
  const int64_t C3 = 3 * int64_t{C};
  const float* base = qkv + static_cast<int64_t>(b) * T * C3;
  float q[DH], acc[DH];
  float m = -CUDART_INF_F, l = 0.0f;
#pragma unroll
  for (int d = 0; d < DH; ++d) {
    q[d] = t1 < T ? base[t1 * C3 + h * DH + d] : 0.0f;  // threads past T only help load tiles
    acc[d] = 0.0f;
  }
  // keys [0, last] matter to this block, last = its last query (causal)
  const int last = min(T - 1, static_cast<int>(blockIdx.y) * kQueries + kQueries - 1);
  for (int k0 = 0; k0 <= last; k0 += kKeys) {
    // kTileLoads elements of k and of v per thread loaded before they are stored, so the loads
    // overlap (a load after a shared store it cannot prove apart waits for that store)
    constexpr int kPerThread = kKeys * DH / kQueries, kTileLoads = kPerThread < 8 ? kPerThread : 8;
    for (int i0 = 0; i0 < kPerThread; i0 += kTileLoads) {
      float kv[kTileLoads], vv[kTileLoads];
#pragma unroll
      for (int u = 0; u < kTileLoads; ++u) {
        const int i = (i0 + u) * kQueries + threadIdx.x, j = i / DH, d = i % DH, t2 = k0 + j;
        kv[u] = t2 < T ? base[t2 * C3 + C + h * DH + d] : 0.0f;
        vv[u] = t2 < T ? base[t2 * C3 + 2 * C + h * DH + d] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kTileLoads; ++u) {
        const int i = (i0 + u) * kQueries + threadIdx.x;
        ks[i / DH][i % DH] = kv[u];
        vs[i / DH][i % DH] = vv[u];
      }
    }
    __syncthreads();
    const int jmax = min(kKeys, t1 - k0 + 1);  // keys t2 <= t1 (<= 0 when t1 >= T is false)
    for (int j = 0; j < jmax; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < DH; ++d) s = fmaf(q[d], ks[j][d], s);
      online_update<DH>(s * scale, vs[j], m, l, acc);
    }
    __syncthreads();
  }
  if (t1 >= T) return;
  float* o = out + (static_cast<int64_t>(b) * T + t1) * C + h * DH;
  const float inv = 1.0f / l;
#pragma unroll
  for (int d = 0; d < DH; ++d) o[d] = acc[d] * inv;
  if (lse) lse[static_cast<int64_t>(bh) * T + t1] = m + logf(l);
}

template <int DH>
__global__ void attention_decode_kernel(const float* qkv, float* k_cache, float* v_cache,
                                        const int32_t* pos_ptr, float* out, int C, int NH,
                                        int capacity, float scale) {
  const int pos = *pos_ptr;
  if (pos < 0 || pos >= capacity) {  // the host checks first; never write outside the cache
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[c] = CUDART_NAN_F;
    return;
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    k_cache[static_cast<int64_t>(pos) * C + c] = qkv[C + c];
    v_cache[static_cast<int64_t>(pos) * C + c] = qkv[2 * C + c];
  }
  __syncthreads();  // the new row is visible to the whole block
  const int lane = threadIdx.x & 31;
  for (int h = threadIdx.x >> 5; h < NH; h += blockDim.x >> 5) {
    float q[DH], acc[DH];
#pragma unroll
    for (int d = 0; d < DH; ++d) {
      q[d] = qkv[h * DH + d];
      acc[d] = 0.0f;
    }
    float m = -CUDART_INF_F, l = 0.0f;
    for (int t2 = lane; t2 <= pos; t2 += 32) {
      const float* kr = k_cache + static_cast<int64_t>(t2) * C + h * DH;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < DH; ++d) s = fmaf(q[d], kr[d], s);
      online_update<DH>(s * scale, v_cache + static_cast<int64_t>(t2) * C + h * DH, m, l, acc);
    }
    // merge the lanes: rescale each to the warp's max (lanes without a position have m = -inf
    // and l = 0; lane 0 always has position 0, so the max is finite unless a score is NaN)
    float mw = m;
    for (int off = 16; off > 0; off >>= 1) mw = fmaxf(mw, __shfl_xor_sync(0xffffffffu, mw, off));
    const float f = m == -CUDART_INF_F ? 0.0f : expf(m - mw);
    l *= f;
    for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    const float inv = 1.0f / l;
#pragma unroll
    for (int d = 0; d < DH; ++d) {
      float a = acc[d] * f;
      for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
      if (lane == d % 32) out[h * DH + d] = a * inv;
    }
  }
}

void check_heads(const char* what, int64_t C, int64_t NH) {
  MINIGPT_CUDA_REQUIRE(C >= 1 && NH >= 1 && C % NH == 0, what, ": C=", C,
                       " is not a multiple of NH=", NH);
  const int64_t dh = C / NH;
  MINIGPT_CUDA_REQUIRE(dh == 8 || dh == 16 || dh == 32 || dh == 64, what, ": head dim ", dh,
                       " not supported (8, 16, 32 or 64)");
}

template <int DH>
void launch_forward(dim3 grid, cudaStream_t stream, const float* qkv, float* out, float* lse, int T,
                    int C, int NH, float scale) {
  attention_forward_kernel<DH><<<grid, kQueries, 0, stream>>>(qkv, out, lse, T, C, NH, scale);
}

template <int DH>
void launch_decode(int threads, cudaStream_t stream, const float* qkv, float* k_cache,
                   float* v_cache, const int32_t* pos, float* out, int C, int NH, int capacity,
                   float scale) {
  attention_decode_kernel<DH><<<1, threads, 0, stream>>>(qkv, k_cache, v_cache, pos, out, C, NH,
                                                         capacity, scale);
}

}  // namespace

void attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(B >= 0 && T >= 1, "attention_forward: bad shape B=", B, " T=", T);
  check_heads("attention_forward", C, NH);
  if (B == 0) return;
  MINIGPT_CUDA_REQUIRE(qkv && out, "attention_forward: null pointer");
  MINIGPT_CUDA_REQUIRE(B * NH <= (int64_t{1} << 31) - 1 && T <= (int64_t{1} << 24) && C <= (1 << 24),
                       "attention_forward: shape too large");
  const int64_t dh = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(dh));
  const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>((T + kQueries - 1) / kQueries));
  const int t = static_cast<int>(T), c = static_cast<int>(C), nh = static_cast<int>(NH);
  switch (dh) {  // check_heads allowed only these
    case 8: launch_forward<8>(grid, stream, qkv, out, lse, t, c, nh, scale); break;
    case 16: launch_forward<16>(grid, stream, qkv, out, lse, t, c, nh, scale); break;
    case 32: launch_forward<32>(grid, stream, qkv, out, lse, t, c, nh, scale); break;
    default: launch_forward<64>(grid, stream, qkv, out, lse, t, c, nh, scale); break;
  }
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void attention_decode(const float* qkv, float* k_cache, float* v_cache, const int32_t* pos,
                      float* out, int64_t C, int64_t NH, int64_t capacity, cudaStream_t stream) {
  check_heads("attention_decode", C, NH);
  MINIGPT_CUDA_REQUIRE(capacity >= 1 && capacity <= (1 << 24), "attention_decode: bad capacity ",
                       capacity);
  MINIGPT_CUDA_REQUIRE(qkv && k_cache && v_cache && pos && out, "attention_decode: null pointer");
  const int64_t dh = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(dh));
  const int threads = 32 * static_cast<int>(NH < 32 ? NH : 32);
  const int c = static_cast<int>(C), nh = static_cast<int>(NH), cap = static_cast<int>(capacity);
  switch (dh) {  // check_heads allowed only these
    case 8: launch_decode<8>(threads, stream, qkv, k_cache, v_cache, pos, out, c, nh, cap, scale); break;
    case 16: launch_decode<16>(threads, stream, qkv, k_cache, v_cache, pos, out, c, nh, cap, scale); break;
    case 32: launch_decode<32>(threads, stream, qkv, k_cache, v_cache, pos, out, c, nh, cap, scale); break;
    default: launch_decode<64>(threads, stream, qkv, k_cache, v_cache, pos, out, c, nh, cap, scale); break;
  }
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
