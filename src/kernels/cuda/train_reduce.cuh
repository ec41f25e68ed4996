// Device helpers shared by the training kernels (the backward launchers, cross_entropy.h, optimizer.h):
// warp sums and a fixed-order column reduction. Every sum here has an order fixed by the
// launch shape alone, so the results are the same bits on every run.
#pragma once

#include "kernels/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace minigpt::cuda::detail {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Column reduction tile: blockDim (32, kColRows); thread (x, y) sums rows y, y + kColRows, ...
// of column blockIdx.x * 32 + x; then the kColRows partial sums are added in order of y.
constexpr int kColRows = 32;

// Finishes a column sum: `part` is this thread's partial; returns the column's total on the
// threads with threadIdx.y == 0 (others get garbage). smem: kColRows * 32 doubles.
__device__ __forceinline__ double column_total(double part, double* smem) {
  smem[threadIdx.y * 32 + threadIdx.x] = part;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.y == 0)
    for (int y = 0; y < kColRows; ++y) total += smem[y * 32 + threadIdx.x];
  __syncthreads();
  return total;
}

// sum_{k < n} p[k * stride] in the order k = 0, 1, ..., read through L2 (__ldcg: other blocks
// of the grid wrote them), kBatch loads in flight at a time: one L2 round trip per kBatch
// terms instead of one per term (the adds still wait for each other; the loads need not).
template <class T, int kBatch = 16>
__device__ __forceinline__ T ordered_sum_l2(const T* p, int64_t stride, int n) {
  T s = T(0);
  for (int k0 = 0; k0 < n; k0 += kBatch) {
    T v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) v[j] = k0 + j < n ? __ldcg(p + (k0 + j) * stride) : T(0);
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (k0 + j < n) s += v[j];
  }
  return s;
}

// Host: lets `kernel` launch with `bytes` of dynamic shared memory, opting in past the default
// 48 KiB (up to 227 KiB on Hopper); Error naming `what` (the launcher and its sizes) past the
// device's limit. Without a device the limit reads as the default.
template <class Kernel>
void allow_shared_memory(Kernel kernel, int64_t bytes, const char* what) {
  constexpr int kDefault = 48 * 1024;
  int device = 0, optin = kDefault;
  if (bytes > kDefault &&
      (cudaGetDevice(&device) != cudaSuccess ||
       cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)) {
    cudaGetLastError();
    optin = kDefault;
  }
  MINIGPT_CUDA_REQUIRE(bytes <= optin, what, " need ", bytes, " bytes of shared memory per block, more than the ",
                       optin, " a block can have");
  if (bytes > kDefault)
    MINIGPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace minigpt::cuda::detail
