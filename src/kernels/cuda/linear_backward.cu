// Linear backward on the GPU (linear.h): dx = dy W through cuBLAS (gemm.h, pedantic fp32), and
// dW = dy^T x with db = column sums of dy in ONE kernel of ours.
//
// Why not cuBLAS for dW: the products are small (out, in) tiles summed over N = B*T rows (1024
// in the benchmark), a tall-skinny shape that cuBLAS splits over k with extra memset and
// reduction launches; in the training graph every launch costs microseconds of latency. Here
// one launch does the split and its reduction and also yields the bias gradient:
//   grid (in / 32, out / 32, S = N / 128): block (x, y, s) sums rows [128 s, 128 s + 128) of
//   its 32 x 32 tile (each thread a 2 x 2 micro-tile from shared memory, float) into
//   partial[s]; the last block of a tile to finish (a counter per tile, after __threadfence)
//   adds the S partials in order s = 0, 1, ... and writes dW (and db, summed in double).
// The order of every sum is fixed by the shapes alone: the same bits on every run. The last
// block resets its counter to 0, so a captured graph replays with no memset.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

constexpr int kTile = 32;    // dW tile (out x in) per block
constexpr int kRows = 128;   // rows per split (per block)
constexpr int kThreads = 256;

int64_t splits(int64_t N) { return (N + kRows - 1) / kRows; }

__global__ void __launch_bounds__(kThreads)
    weight_grad_kernel(const float* __restrict__ x, const float* __restrict__ dy, float* dW,
                       float* db, float* partial, double* partial_db, int* counters, int N,
                       int in, int out) {
  __shared__ __align__(16) float dy_s[kRows][kTile];
  __shared__ __align__(16) float x_s[kRows][kTile];
  __shared__ double col[kThreads];
  __shared__ bool last;
  const int o0 = blockIdx.y * kTile, i0 = blockIdx.x * kTile, s = blockIdx.z;
  const int S = gridDim.z, r0 = s * kRows, tid = threadIdx.x;
#pragma unroll
  for (int e = tid; e < kRows * kTile; e += kThreads) {  // all loads in flight at once
    const int r = e / kTile, c = e % kTile, row = r0 + r;
    dy_s[r][c] = row < N && o0 + c < out ? dy[static_cast<int64_t>(row) * out + o0 + c] : 0.0f;
    x_s[r][c] = row < N && i0 + c < in ? x[static_cast<int64_t>(row) * in + i0 + c] : 0.0f;
  }
  __syncthreads();
  // thread (ty, tx): outputs o0 + 2 ty + {0, 1} x i0 + 2 tx + {0, 1}
  const int ty = tid / 16, tx = tid % 16;
  float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
#pragma unroll 8
  for (int r = 0; r < kRows; ++r) {
    const float2 d = *reinterpret_cast<const float2*>(&dy_s[r][2 * ty]);
    const float2 v = *reinterpret_cast<const float2*>(&x_s[r][2 * tx]);
    a00 += d.x * v.x;
    a01 += d.x * v.y;
    a10 += d.y * v.x;
    a11 += d.y * v.y;
  }
  const int64_t plane = static_cast<int64_t>(out) * in;
  const int o = o0 + 2 * ty, i = i0 + 2 * tx;
  float* p = partial + s * plane;
  const float a[2][2] = {{a00, a01}, {a10, a11}};
  for (int u = 0; u < 2; ++u)
    for (int w = 0; w < 2; ++w)
      if (o + u < out && i + w < in) p[static_cast<int64_t>(o + u) * in + i + w] = a[u][w];
  // this split's column sums of dy (tiles of the first column of blocks only): column tid % 32,
  // rows (tid / 32) + 8 k, then the 8 row groups added in order
  const bool with_db = db != nullptr && blockIdx.x == 0;
  if (with_db) {
    double c = 0.0;
    for (int r = tid / kTile; r < kRows; r += kThreads / kTile) c += dy_s[r][tid % kTile];
    col[tid] = c;
    __syncthreads();
    if (tid < kTile) {
      double t = 0.0;
      for (int g = 0; g < kThreads / kTile; ++g) t += col[g * kTile + tid];
      if (o0 + tid < out) partial_db[static_cast<int64_t>(s) * out + o0 + tid] = t;
    }
  }
  __threadfence();  // publish this block's partials before counting it in
  __syncthreads();
  const int tile = blockIdx.y * gridDim.x + blockIdx.x;
  if (tid == 0) last = atomicAdd(&counters[tile], 1) == S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // the 2 x 2 outputs' sums over the S partials, each in order s = 0, 1, ...: the loads of all
  // four issued together, kBatch splits at a time (one L2 round trip per batch, not per output)
  constexpr int kBatch = 8;
  const bool ok[2][2] = {{o < out && i < in, o < out && i + 1 < in}, {o + 1 < out && i < in, o + 1 < out && i + 1 < in}};
  float sum[2][2] = {};
  for (int k0 = 0; k0 < S; k0 += kBatch) {
    float t[kBatch][2][2];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int w = 0; w < 2; ++w)
          t[j][u][w] = k0 + j < S && ok[u][w]
                           ? __ldcg(partial + (k0 + j) * plane + static_cast<int64_t>(o + u) * in + i + w)
                           : 0.0f;
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int w = 0; w < 2; ++w)
          if (k0 + j < S) sum[u][w] += t[j][u][w];
  }
  for (int u = 0; u < 2; ++u)
    for (int w = 0; w < 2; ++w)
      if (ok[u][w]) dW[static_cast<int64_t>(o + u) * in + i + w] = sum[u][w];
  if (with_db && tid < kTile && o0 + tid < out) {
    db[o0 + tid] = static_cast<float>(detail::ordered_sum_l2(partial_db + o0 + tid, out, S));
  }
  if (tid == 0) counters[tile] = 0;  // ready for the next call (or graph replay)
}

}  // namespace

LinearGradScratchSize linear_backward_scratch(int64_t N, int64_t in, int64_t out) {
  const int64_t tiles = ((in + kTile - 1) / kTile) * ((out + kTile - 1) / kTile);
  return {splits(N) * out * in, splits(N) * out, tiles};
}

namespace {
void check_sizes(int64_t N, int64_t in, int64_t out) {
  MINIGPT_CUDA_REQUIRE(N >= 1 && in >= 1 && out >= 1 && N < (int64_t{1} << 31) &&
                           in < (int64_t{1} << 24) && out < (int64_t{1} << 24) &&
                           splits(N) < 65536,
                       "linear_backward: bad sizes N=", N, " in=", in, " out=", out);
}
}  // namespace

void linear_backward_data(const Cublas& blas, const float* W, const float* dy, float* dx, int64_t N,
                          int64_t in, int64_t out, cudaStream_t stream) {
  check_sizes(N, in, out);
  // dx (N, in) = dy (N, out) @ W (out, in)
  gemm(blas, false, false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in, stream);
}

void linear_backward_weights(const float* x, const float* dy, float* dW, float* db, int64_t N, int64_t in,
                             int64_t out, const LinearGradScratch& scratch, cudaStream_t stream) {
  check_sizes(N, in, out);
  const LinearGradScratchSize need = linear_backward_scratch(N, in, out);
  MINIGPT_CUDA_REQUIRE(scratch.partial && scratch.partial_db && scratch.counters &&
                           scratch.size.partial >= need.partial &&
                           scratch.size.partial_db >= need.partial_db &&
                           scratch.size.counters >= need.counters,
                       "linear_backward: the scratch is missing or too small for N=", N, " in=", in,
                       " out=", out);
  // dW (out, in) = dy^T x and db (out) = column sums of dy, one launch
  const dim3 grid(static_cast<unsigned>((in + kTile - 1) / kTile),
                  static_cast<unsigned>((out + kTile - 1) / kTile), static_cast<unsigned>(splits(N)));
  weight_grad_kernel<<<grid, kThreads, 0, stream>>>(x, dy, dW, db, scratch.partial, scratch.partial_db,
                                                    scratch.counters, static_cast<int>(N),
                                                    static_cast<int>(in), static_cast<int>(out));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void linear_backward(const Cublas& blas, const float* x, const float* W, const float* dy, float* dx,
                     float* dW, float* db, int64_t N, int64_t in, int64_t out,
                     const LinearGradScratch& scratch, cudaStream_t stream) {
  if (dx) linear_backward_data(blas, W, dy, dx, N, in, out, stream);
  linear_backward_weights(x, dy, dW, db, N, in, out, scratch, stream);
}

}  // namespace minigpt::cuda
