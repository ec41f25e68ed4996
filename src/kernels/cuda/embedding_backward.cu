// Embedding backward on the GPU (embedding.h) without atomics, so every run gives the same
// bits, and the CPU's: row v of dwte is the float sum, in increasing position order, of the dx
// rows whose id is v (GrammarMiniGPT::backward's serial scatter-add); row t of dwpe sums the dx
// rows at position t over the batch in order.
//
// One launch, a block per row of dwte, then one per row of dwpe. For row v of dwte the first
// warp reads the ids (1024 at a time, all loads in flight) and, a ballot per 32, lists the
// positions holding v in shared memory in increasing order; then each warp adds those rows in
// order (lane = column) with the loads of up to 16 rows in flight together (a frequent token
// has ~100 rows in a batch of 1024: one L2 round trip per row, or per 32-id window holding one,
// would make its block the step's slowest).
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/cuda_check.h"

namespace minigpt::cuda {
namespace {

constexpr int kWarps = 2;

constexpr int kIdsChunk = 1024;  // ids staged in shared memory at a time
constexpr int kInFlight = 16;    // matching rows whose loads are issued together

__device__ void wte_row(const float* __restrict__ dx, const int32_t* __restrict__ ids,
                        float* __restrict__ dwte, int N, int d, int v) {
  __shared__ int32_t rows_s[kIdsChunk];  // this chunk's positions holding v, in increasing order
  __shared__ int hits_s;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int cbase = 0; cbase < d; cbase += kWarps * 32) {  // the same trip count for every warp
    const int c = cbase + warp * 32 + lane;
    float acc = 0.0f;
    for (int n0 = 0; n0 < N; n0 += kIdsChunk) {
      const int n = min(kIdsChunk, N - n0);
      __syncthreads();  // every warp is done with the previous chunk's list
      if (warp == 0) {  // compact the matches: a ballot per 32 ids, the ids' loads all in flight
        int id[kIdsChunk / 32];
#pragma unroll
        for (int j = 0; j < kIdsChunk / 32; ++j) id[j] = j * 32 + lane < n ? ids[n0 + j * 32 + lane] : -1;
        int hits = 0;
#pragma unroll
        for (int j = 0; j < kIdsChunk / 32; ++j) {
          const unsigned b = __ballot_sync(0xffffffffu, id[j] == v);
          if (id[j] == v) rows_s[hits + __popc(b & ((1u << lane) - 1u))] = n0 + j * 32 + lane;
          hits += __popc(b);
        }
        if (lane == 0) hits_s = hits;
      }
      __syncthreads();
      const int hits = hits_s;
      for (int h0 = 0; h0 < hits; h0 += kInFlight) {  // loads first, then the adds in order
        float x[kInFlight];
#pragma unroll
        for (int j = 0; j < kInFlight; ++j)
          x[j] = h0 + j < hits && c < d ? dx[static_cast<int64_t>(rows_s[h0 + j]) * d + c] : 0.0f;
#pragma unroll
        for (int j = 0; j < kInFlight; ++j)
          if (h0 + j < hits) acc += x[j];
      }
    }
    if (c < d) dwte[static_cast<int64_t>(v) * d + c] = acc;
  }
}

// position row t of wpe (rows t >= T get 0), threads over columns
__device__ void wpe_row(const float* __restrict__ dx, float* __restrict__ dwpe, int B, int T, int d,
                        int t) {
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.0f;
    if (t < T) {
#pragma unroll 16
      for (int b = 0; b < B; ++b) acc += dx[(static_cast<int64_t>(b) * T + t) * d + c];  // loads in flight
    }
    dwpe[static_cast<int64_t>(t) * d + c] = acc;
  }
}

// One launch: blocks [0, V) are wte rows, blocks [V, V + P) wpe rows.
__global__ void embedding_backward_kernel(const float* __restrict__ dx, const int32_t* __restrict__ ids,
                                          float* __restrict__ dwte, float* __restrict__ dwpe, int B,
                                          int T, int d, int V) {
  if (static_cast<int>(blockIdx.x) < V)
    wte_row(dx, ids, dwte, B * T, d, blockIdx.x);
  else
    wpe_row(dx, dwpe, B, T, d, blockIdx.x - V);
}

}  // namespace

void embedding_backward(const float* dx, const int32_t* ids, float* dwte, float* dwpe, int64_t B,
                        int64_t T, int64_t d, int64_t V, int64_t P, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(B >= 0 && T >= 1 && d >= 1 && V >= 1 && P >= T && B * T < (int64_t{1} << 31) &&
                           V < (int64_t{1} << 31) && P < (int64_t{1} << 31),
                       "embedding_backward: bad sizes B=", B, " T=", T, " d=", d, " V=", V, " P=", P);
  MINIGPT_CUDA_REQUIRE(V + P < (int64_t{1} << 31), "embedding_backward: V + P too large");
  embedding_backward_kernel<<<static_cast<unsigned>(V + P), kWarps * 32, 0, stream>>>(
      dx, ids, dwte, dwpe, static_cast<int>(B), static_cast<int>(T), static_cast<int>(d), static_cast<int>(V));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
