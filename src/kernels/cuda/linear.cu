// Fused Linear on the GPU (linear.h): a tiled fp32 GEMM with a LayerNorm prologue and a
// bias / GELU / residual epilogue, sized for the model's small products (M = B*T rows of 32 to a
// few thousand, K = 64 or 256, N = 64 to 600), where a cuBLAS call plus separate LayerNorm and
// epilogue kernels costs more in launches than in arithmetic.
//
// Block: 256 threads own a 32 x 32 tile of y (thread (ty, tx) owns rows ty, ty+8, ty+16, ty+24
// of column tx). K is walked in chunks of 32: the x chunk (layer-normed on the way in, with row
// statistics computed once per block, one warp per row) and the W chunk (transposed, padded
// against bank conflicts) go through shared memory; each output sums its K products in order.
// The next chunk's loads (and, first, the epilogue's bias and residuals) are issued before the
// current chunk is summed, so the block waits for L2 about once, not once per chunk.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/linear.h"

namespace minigpt::cuda {
namespace {

constexpr int kTile = 32;               // BM = BN = KC
constexpr int kThreads = 256;           // 8 warps
constexpr int kRowsPerThread = kTile / (kThreads / 32);  // 4

// y[i] = act(v) (and GELU' into gelu_grad), v already holding (sum + b) + residual.
__device__ __forceinline__ void store_activation(float v, int64_t i, float* y, const LinearFusion& f) {
  if (f.gelu) {
    if (f.gelu_grad) f.gelu_grad[i] = gelu_erf_grad(v);
    v = gelu_erf(v);
  }
  y[i] = v;
}

// y = act(v + residual) for one element, v = (x W^T)[m][n] + b[n]: the CPU's order
// ((sum + b) + residual, then the GELU; kernels/cpu/linear.cpp).
__device__ __forceinline__ void store_epilogue(float v, int64_t i, float* y, const LinearFusion& f) {
  if (f.residual) v = v + f.residual[i];
  store_activation(v, i, y, f);
}

__global__ void __launch_bounds__(kThreads) linear_forward_kernel(
    const float* __restrict__ x, const float* __restrict__ W, const float* __restrict__ b, float* y,
    int64_t M, int64_t K, int64_t N, LinearFusion f) {
  __shared__ float xs[kTile][kTile + 1];  // [m][k]
  __shared__ float ws[kTile][kTile + 1];  // [k][n]: W chunk transposed
  __shared__ float mean_s[kTile], rstd_s[kTile];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t m0 = blockIdx.y * int64_t{kTile}, n0 = blockIdx.x * int64_t{kTile};
  const bool ln = f.ln_weight != nullptr;

  if (ln) {  // row statistics of this block's rows, warp ty owns rows ty, ty+8, ...
    for (int r = ty; r < kTile; r += kThreads / 32) {
      float mean = 0.0f, rstd = 0.0f;
      if (m0 + r < M) warp_row_stats(x + (m0 + r) * K, K, f.ln_eps, mean, rstd);
      if (tx == 0) {
        mean_s[r] = mean;
        rstd_s[r] = rstd;
      }
    }
    __syncthreads();
  }

  // The epilogue's bias and residuals first (y may alias the residual: each element is read
  // here, by the thread that later writes it), so their loads overlap the product's.
  const int64_t n = n0 + tx;
  const float bias = b && n < N ? b[n] : 0.0f;
  float res[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + i * (kThreads / 32);
    res[i] = f.residual && m < M && n < N ? f.residual[m * N + n] : 0.0f;
  }

  // Chunk loads into registers one chunk ahead: chunk k0 + kTile's global loads are in flight
  // while chunk k0 is summed from shared memory (one L2 round trip per kernel, not per chunk).
  float xv[kRowsPerThread], wv[kRowsPerThread], lw = 0.0f, lb = 0.0f;
  auto load_chunk = [&](int64_t k0) {
    const int64_t k = k0 + tx;
    lw = ln && k < K ? f.ln_weight[k] : 0.0f;
    lb = ln && k < K ? f.ln_bias[k] : 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = ty + i * (kThreads / 32);
      const int64_t m = m0 + r, nr = n0 + r;
      xv[i] = m < M && k < K ? x[m * K + k] : 0.0f;
      wv[i] = nr < N && k < K ? W[nr * K + k] : 0.0f;
    }
  };
  load_chunk(0);
  float acc[kRowsPerThread] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    const int64_t k = k0 + tx;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = ty + i * (kThreads / 32);
      float v = xv[i];
      if (ln && m0 + r < M && k < K) v = (v - mean_s[r]) * rstd_s[r] * lw + lb;
      xs[r][tx] = v;
      ws[tx][r] = wv[i];
    }
    __syncthreads();
    if (k0 + kTile < K) load_chunk(k0 + kTile);
    if (K - k0 >= kTile) {  // a full chunk: unrolled
#pragma unroll
      for (int kk = 0; kk < kTile; ++kk) {
        const float w = ws[kk][tx];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) acc[i] = fmaf(xs[ty + i * (kThreads / 32)][kk], w, acc[i]);
      }
    } else {
      const int kc = static_cast<int>(K - k0);
      for (int kk = 0; kk < kc; ++kk) {
        const float w = ws[kk][tx];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) acc[i] = fmaf(xs[ty + i * (kThreads / 32)][kk], w, acc[i]);
      }
    }
    __syncthreads();
  }

  if (n >= N) return;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + i * (kThreads / 32);
    float v = acc[i] + bias;
    if (f.residual) v = v + res[i];
    if (m < M) store_activation(v, m * N + n, y, f);
  }
}

__global__ void linear_epilogue_kernel(float* y, const float* b, int64_t M, int64_t N,
                                       LinearFusion f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < M * N;
       i += int64_t{gridDim.x} * blockDim.x)
    store_epilogue(y[i] + (b ? b[i % N] : 0.0f), i, y, f);
}

}  // namespace

void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t M,
                    int64_t K, int64_t N, const LinearFusion& fusion, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(M >= 0 && K >= 1 && N >= 1, "linear_forward: bad shape M=", M, " K=", K,
                       " N=", N);
  MINIGPT_CUDA_REQUIRE((fusion.ln_weight == nullptr) == (fusion.ln_bias == nullptr),
                       "linear_forward: LayerNorm prologue needs both weight and bias");
  MINIGPT_CUDA_REQUIRE(fusion.gelu || fusion.gelu_grad == nullptr,
                       "linear_forward: gelu_grad given without gelu");
  MINIGPT_CUDA_REQUIRE(fusion.residual == nullptr || fusion.residual != x,
                       "linear_forward: the residual may alias y, not x");
  if (M == 0) return;
  MINIGPT_CUDA_REQUIRE(x && W && y, "linear_forward: null pointer");
  MINIGPT_CUDA_REQUIRE(x != y, "linear_forward: y must not alias x");
  MINIGPT_CUDA_REQUIRE((M + kTile - 1) / kTile <= 65535, "linear_forward: M=", M, " too large");
  const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile),
                  static_cast<unsigned>((M + kTile - 1) / kTile));
  linear_forward_kernel<<<grid, kThreads, 0, stream>>>(x, W, b, y, M, K, N, fusion);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void linear_epilogue(float* y, const float* b, int64_t M, int64_t N, const LinearFusion& fusion,
                     cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(M >= 0 && N >= 1, "linear_epilogue: bad shape M=", M, " N=", N);
  MINIGPT_CUDA_REQUIRE(fusion.ln_weight == nullptr && fusion.ln_bias == nullptr,
                       "linear_epilogue: a LayerNorm prologue cannot follow the product");
  MINIGPT_CUDA_REQUIRE(fusion.gelu || fusion.gelu_grad == nullptr,
                       "linear_epilogue: gelu_grad given without gelu");
  if (M == 0) return;
  MINIGPT_CUDA_REQUIRE(y, "linear_epilogue: null y");
  constexpr int kBlock = 256;
  const int64_t blocks = (M * N + kBlock - 1) / kBlock;
  linear_epilogue_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kBlock, 0, stream>>>(
      y, b, M, N, fusion);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
