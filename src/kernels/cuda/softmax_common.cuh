// Device helpers shared by the CUDA softmax kernels: cache-mode loads and stores, the
// (max, sum) pair that the fused kernels reduce, and warp/block reductions of it.
// Device code only; included by the .cu files, never by plain C++.
//
// Special values (docs/ARCHITECTURE.md): the pair reduction keeps a row's NaN or +inf as a NaN sum, and
// an all -inf row as (max -inf, sum 0), whose final scale 0/0 is NaN. A thread whose own
// values are all -inf (or padding) contributes (-inf, 0) without poisoning a finite row.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace minigpt::cuda::detail {

inline constexpr float kLog2e = 1.4426950408889634f;

// exp(d) for d <= 0 (or NaN) through the SFU's exp2 (ex2.approx.ftz: one MUFU.EX2; exp2f's
// non-ftz form adds a range test and two multiplies around it, and doubles the MUFU count where
// the compiler if-converts it). Relative error ~ |d| * 6e-8 + 2 ulp; results below 2^-126 flush
// to 0 (an absolute error under 1.2e-38); exp(-inf) = 0, exp(NaN) = NaN.
__device__ __forceinline__ float exp_le0(float d) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d * kLog2e));
  return r;
}

// The max used to shift a thread's values: -inf would make (-inf) - (-inf) = NaN, so a thread
// that saw only -inf shifts by 0 and its exps come out 0 (or NaN where a NaN was read).
__device__ __forceinline__ float shift_of(float m) { return m == -INFINITY ? 0.f : m; }

// exp(m - M): the factor that rescales a partial sum taken at max m to the common max M >= m.
// 0 when m is -inf (the partial sum is then 0, or NaN, which the product keeps).
__device__ __forceinline__ float rescale(float m, float M) {
  return m == -INFINITY ? 0.f : exp_le0(m - M);
}

// NaN-ignoring max: NaN rows are caught by the sum, not the max.
__device__ __forceinline__ float max_ignoring_nan(float a, float b) { return b > a ? b : a; }

struct MaxSum {
  float m;  // max of the values seen (ignoring NaN), -inf for none
  float s;  // sum of exp(x - m) over them; NaN when a NaN or +inf was seen
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float M = max_ignoring_nan(a.m, b.m);
  return {M, a.s * rescale(a.m, M) + b.s * rescale(b.m, M)};
}

// Reduce over `width` consecutive lanes (a power of two <= 32) named by `mask`.
template <int WIDTH>
__device__ __forceinline__ MaxSum warp_reduce(MaxSum v, unsigned mask) {
#pragma unroll
  for (int off = WIDTH / 2; off > 0; off /= 2) {
    MaxSum o{__shfl_xor_sync(mask, v.m, off, WIDTH), __shfl_xor_sync(mask, v.s, off, WIDTH)};
    v = combine(v, o);
  }
  return v;
}

// Whole-block reduction of a MaxSum; every thread of the block must call it. `scratch` holds
// 32 entries plus one for the result. Returns the block's pair to every thread.
__device__ __forceinline__ MaxSum block_reduce(MaxSum v, MaxSum* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_reduce<32>(v, 0xffffffffu);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    MaxSum w = lane < nwarps ? scratch[lane] : MaxSum{-INFINITY, 0.f};
    w = warp_reduce<32>(w, 0xffffffffu);
    if (lane == 0) scratch[32] = w;
  }
  __syncthreads();
  return scratch[32];
}

// Loads and stores in the two cache modes: STREAM = evict-first (ld.global.cs / st.global.cs),
// otherwise the default (cache at all levels).
template <bool STREAM>
__device__ __forceinline__ float4 load4(const float4* p) {
  if constexpr (STREAM) return __ldcs(p);
  else return *p;
}
template <bool STREAM>
__device__ __forceinline__ float load1(const float* p) {
  if constexpr (STREAM) return __ldcs(p);
  else return *p;
}
template <bool STREAM>
__device__ __forceinline__ void store4(float4* p, float4 v) {
  if constexpr (STREAM) __stcs(p, v);
  else *p = v;
}
template <bool STREAM>
__device__ __forceinline__ void store1(float* p, float v) {
  if constexpr (STREAM) __stcs(p, v);
  else *p = v;
}

// A row's split into a scalar head (to reach 16-byte alignment), 16-byte body and scalar tail.
struct RowSplit {
  int head;   // 0..3 floats before the first 16-byte boundary
  int body;   // float4 count
  int tail;   // 0..3 floats after the body
};
__device__ __forceinline__ RowSplit split_row(const float* row, int cols) {
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(row) >> 2) & 3);
  int head = (4 - mis) & 3;
  head = head < cols ? head : cols;
  const int body = (cols - head) >> 2;
  return {head, body, cols - head - 4 * body};
}

// Edge element a lane of a row group holds: lanes [0, head) the head, [head, head+tail) the
// tail; -1 for none. Needs a group of >= 6 lanes.
__device__ __forceinline__ int edge_index(const RowSplit& r, int lane) {
  if (lane < r.head) return lane;
  if (lane < r.head + r.tail) return 4 * r.body + lane;  // = head + 4*body + (lane - head)
  return -1;
}

}  // namespace minigpt::cuda::detail
