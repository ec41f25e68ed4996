// Causal attention backward on the GPU (attention.h), fused per (batch, head): one block loads
// q, k, v and the output gradient g of its head into shared memory, recomputes the scores and
// the softmax P (as kernels/cpu/attention.cpp: scale 1/sqrt(dh), max subtracted, exp, times
// 1/sum; masked keys never computed), then, with dP = g v^T,
//   dS = P (dP - rowsum(P dP)) scale;  dq = dS k;  dk = dS^T q;  dv = P^T g
// and writes every dq, dk, dv element of its head once. Nothing of size (T, T) leaves the chip.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/train_reduce.cuh"

#include <cmath>

namespace minigpt::cuda {
namespace {

// Shared memory: q, k, v, g (T, dh + 1) each (padded: rows in different banks), P, dS (T, T).
__host__ __device__ inline int64_t smem_floats(int64_t T, int64_t dh) {
  return 4 * T * (dh + 1) + 2 * T * T;
}

__global__ void attention_backward_kernel(const float* __restrict__ dout,
                                          const float* __restrict__ qkv,
                                          float* __restrict__ dqkv, int T, int C, int NH,
                                          float scale) {
  extern __shared__ float sm[];
  const int dh = C / NH, ld = dh + 1;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH;
  float* q = sm;
  float* k = q + T * ld;
  float* v = k + T * ld;
  float* g = v + T * ld;
  float* P = g + T * ld;
  float* dS = P + T * T;
  const int C3 = 3 * C;
  const float* base = qkv + static_cast<int64_t>(b) * T * C3 + h * dh;
  const float* gbase = dout + static_cast<int64_t>(b) * T * C + h * dh;
  for (int i = threadIdx.x; i < T * dh; i += blockDim.x) {
    const int t = i / dh, d = i % dh;
    q[t * ld + d] = base[t * C3 + d];
    k[t * ld + d] = base[t * C3 + C + d];
    v[t * ld + d] = base[t * C3 + 2 * C + d];
    g[t * ld + d] = gbase[t * C + d];
  }
  __syncthreads();
  // scores S[i][j] (j <= i) into P, and dP[i][j] = g_i . v_j into dS
  for (int e = threadIdx.x; e < T * T; e += blockDim.x) {
    const int i = e / T, j = e % T;
    if (j > i) continue;
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < dh; ++d) {
      s += q[i * ld + d] * k[j * ld + d];
      dp += g[i * ld + d] * v[j * ld + d];
    }
    P[e] = s * scale;
    dS[e] = dp;
  }
  __syncthreads();
  // per row: softmax over keys 0..i, then dS = P (dP - sum_j P dP) scale; masked entries 0
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    float* p = P + i * T;
    float* ds = dS + i * T;
    float mx = -INFINITY;
    for (int j = 0; j <= i; ++j) mx = fmaxf(mx, p[j]);
    float sum = 0.0f;
    for (int j = 0; j <= i; ++j) {
      p[j] = expf(p[j] - mx);  // max subtracted: every exp <= 1
      sum += p[j];
    }
    const float inv = 1.0f / sum;
    float rowsum = 0.0f;
    for (int j = 0; j <= i; ++j) {
      p[j] *= inv;
      rowsum += p[j] * ds[j];
    }
    for (int j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - rowsum) * scale;
    for (int j = i + 1; j < T; ++j) p[j] = ds[j] = 0.0f;
  }
  __syncthreads();
  float* dbase = dqkv + static_cast<int64_t>(b) * T * C3 + h * dh;
  for (int e = threadIdx.x; e < T * dh; e += blockDim.x) {
    const int t = e / dh, d = e % dh;
    float dq = 0.0f, dk = 0.0f, dv = 0.0f;
    for (int j = 0; j <= t; ++j) dq += dS[t * T + j] * k[j * ld + d];
    for (int i = t; i < T; ++i) {
      dk += dS[i * T + t] * q[i * ld + d];
      dv += P[i * T + t] * g[i * ld + d];
    }
    dbase[t * C3 + d] = dq;
    dbase[t * C3 + C + d] = dk;
    dbase[t * C3 + 2 * C + d] = dv;
  }
}

}  // namespace

void attention_backward(const float* dout, const float* qkv, float* dqkv, int64_t B, int64_t T,
                        int64_t C, int64_t NH, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(B >= 0 && T >= 1 && C >= 1 && NH >= 1 && C % NH == 0,
                       "attention_backward: bad sizes B=", B, " T=", T, " C=", C, " NH=", NH);
  const int64_t bytes = smem_floats(T, C / NH) * static_cast<int64_t>(sizeof(float));
  MINIGPT_CUDA_REQUIRE(B * NH < (int64_t{1} << 31), "attention_backward: B*NH too large");
  // T = 64 with head size 16 takes 50 KiB: past the default 48 KiB
  detail::allow_shared_memory(attention_backward_kernel, bytes,
                              cat("attention_backward: T=", T, " and head size ", C / NH).c_str());
  if (B == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  attention_backward_kernel<<<static_cast<unsigned>(B * NH), 128, static_cast<size_t>(bytes),
                              stream>>>(dout, qkv, dqkv, static_cast<int>(T), static_cast<int>(C),
                                        static_cast<int>(NH), scale);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
