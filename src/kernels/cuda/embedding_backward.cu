// Embedding backward on the GPU (embedding.h) without atomics, so every run gives the same
// bits, and the CPU's: row v of dwte is the float sum, in increasing position order, of the dx
// rows whose id is v (GrammarMiniGPT::backward's serial scatter-add); row t of dwpe sums the dx
// rows at position t over the batch in order.
//
// One launch, a block per row of dwte, then one per row of dwpe. For row v of dwte each warp
// scans the ids 32 at a time; a ballot marks the positions holding v and the warp adds those
// rows in order (lane = column). The scan reads the N ids once per warp: 4 KiB from L2 at
// N = 1024.
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/cuda_check.h"

namespace minigpt::cuda {
namespace {

constexpr int kWarps = 2;

__device__ void wte_row(const float* __restrict__ dx, const int32_t* __restrict__ ids,
                        float* __restrict__ dwte, int N, int d, int v) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int c0 = warp * 32; c0 < d; c0 += kWarps * 32) {
    const int c = c0 + lane;
    float acc = 0.0f;
    for (int i0 = 0; i0 < N; i0 += 32) {
      const int i = i0 + lane;
      unsigned hits = __ballot_sync(0xffffffffu, i < N && ids[i] == v);
      while (hits) {
        const int r = i0 + __ffs(hits) - 1;
        hits &= hits - 1;
        if (c < d) acc += dx[static_cast<int64_t>(r) * d + c];
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
    if (t < T)
      for (int b = 0; b < B; ++b) acc += dx[(static_cast<int64_t>(b) * T + t) * d + c];
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
