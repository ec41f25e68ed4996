// Token + position embedding on the GPU (embedding.h): one thread per element of x.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"

#include <math_constants.h>

namespace minigpt::cuda {
namespace {

__device__ __forceinline__ float embed_one(int32_t id, int32_t pos, const float* wte,
                                           const float* wpe, int64_t c, int64_t C, int64_t V,
                                           int64_t P) {
  if (id < 0 || id >= V || pos < 0 || pos >= P) return CUDART_NAN_F;  // host checks first
  return wte[id * C + c] + wpe[pos * C + c];
}

// x (B*T, C): element i = (row, c), row = b*T + t.
__global__ void embedding_forward_kernel(const int32_t* ids, const float* wte, const float* wpe,
                                         float* x, int64_t rows, int64_t T, int64_t C, int64_t V,
                                         int64_t P) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows * C) return;
  const int64_t row = i / C, c = i % C;
  x[i] = embed_one(ids[row], static_cast<int32_t>(row % T), wte, wpe, c, C, V, P);
}

__global__ void embedding_decode_kernel(const int32_t* id, const int32_t* pos, const float* wte,
                                        const float* wpe, float* x, int64_t C, int64_t V,
                                        int64_t P) {
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) x[c] = embed_one(*id, *pos, wte, wpe, c, C, V, P);
}

void check_tables(const char* what, const float* wte, const float* wpe, float* x, int64_t C,
                  int64_t V, int64_t P) {
  MINIGPT_CUDA_REQUIRE(C >= 1 && V >= 1 && P >= 1, what, ": bad sizes C=", C, " V=", V, " P=", P);
  MINIGPT_CUDA_REQUIRE(wte && wpe && x, what, ": null pointer");
}

}  // namespace

void embedding_forward(const int32_t* ids, const float* wte, const float* wpe, float* x,
                       int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(B >= 0 && T >= 1 && T <= P, "embedding_forward: bad shape B=", B, " T=", T,
                       " (positions ", P, ")");
  if (B == 0) return;
  check_tables("embedding_forward", wte, wpe, x, C, V, P);
  MINIGPT_CUDA_REQUIRE(ids, "embedding_forward: null ids");
  constexpr int kThreads = 256;
  const int64_t n = B * T * C;
  embedding_forward_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                             stream>>>(ids, wte, wpe, x, B * T, T, C, V, P);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void embedding_decode(const int32_t* id, const int32_t* pos, const float* wte, const float* wpe,
                      float* x, int64_t C, int64_t V, int64_t P, cudaStream_t stream) {
  check_tables("embedding_decode", wte, wpe, x, C, V, P);
  MINIGPT_CUDA_REQUIRE(id && pos, "embedding_decode: null id or position");
  embedding_decode_kernel<<<1, 128, 0, stream>>>(id, pos, wte, wpe, x, C, V, P);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
