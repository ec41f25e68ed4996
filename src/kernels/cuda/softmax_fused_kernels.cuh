// The fused softmax kernels as templates (instantiated in softmax_fused_rows.cu and
// softmax_fused_block.cu) and the tables that hand out one instantiation by its parameters.
// Every variant reads each element once and writes it once, except Online (two reads).
//
// The register variants work on a row in four steps: load the thread's share of the row into
// registers (16-byte loads on the aligned body, the <= 6 head/tail floats one per lane); the
// thread's own max m and its exps e = exp(x - m) in place with their sum s; one reduction of the
// (m, s) pairs over the row's threads (shuffles, then shared memory, then the cluster's
// distributed shared memory) giving (M, S); write e * exp(m - M) / S. One reduction round per
// row instead of two (max, then sum), and each exp computed once.
#pragma once

#include "kernels/cuda/softmax_cluster.cuh"
#include "kernels/cuda/softmax_common.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace minigpt::cuda::detail {

using FusedKernel = void (*)(const float*, float*, int64_t, int, int);

// v[k] = exp(v[k] - sh) for a thread's held values and ev = exp(ev - sh) for its head/tail
// element; returns their sum. sh is the thread's shift_of(max) (one round) or the row max.
template <int N>
__device__ __forceinline__ float exp_in_place_sum(float (&v)[N], float& ev, float sh) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    v[k] = exp_le0(v[k] - sh);
    s += v[k];
  }
  ev = exp_le0(ev - sh);
  return s + ev;
}

// Stores v * c as NV float4 of the 16-byte body: slot k of this thread is float4 index
// first + k * stride, written where it is below end.
template <int NV, bool STREAM>
__device__ __forceinline__ void store_scaled4(float4* yb, const float (&v)[4 * NV], float c, int first,
                                              int stride, int end) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = first + k * stride;
    if (j < end)
      store4<STREAM>(yb + j, make_float4(v[4 * k] * c, v[4 * k + 1] * c, v[4 * k + 2] * c, v[4 * k + 3] * c));
  }
}

// ---- Rows: a sub-warp of TPR lanes per row (block = TPR x rows_per_block), row in registers.
// Each lane holds NV float4 of the body (VEC = 4) or 4*NV scalars (VEC = 1). `unused` keeps
// one signature for every table entry. TWO_ROUND: reduce the max, then the sum of exp(x - M)
// (two short shuffle chains, no exp inside them: lower latency for launch-bound sizes) instead
// of one round of (max, sum) pairs.
template <int TPR, int NV, int VEC, bool STREAM, bool TWO_ROUND>
__global__ void fused_rows_kernel(const float* x, float* y, int64_t rows, int cols, int unused) {
  static_assert(VEC == 1 || TPR >= 8, "16-byte rows need >= 8 lanes for head and tail");
  const int lane = threadIdx.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole sub-warp leaves together
  unsigned mask = 0xffffffffu;
  if constexpr (TPR < 32) {
    const int warp_lane = (threadIdx.y * TPR + lane) & 31;
    mask = ((1u << TPR) - 1u) << (warp_lane - lane);
  }
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  constexpr int N = 4 * NV;
  float v[N];
  float ev = -INFINITY;  // this lane's head/tail element (VEC = 4)
  int eidx = -1;
  RowSplit r{0, 0, 0};
  if constexpr (VEC == 4) {
    r = split_row(xr, cols);
    const float4* xb = reinterpret_cast<const float4*>(xr + r.head);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = lane + k * TPR;
      const float4 q = j < r.body ? load4<STREAM>(xb + j)
                                  : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      v[4 * k] = q.x, v[4 * k + 1] = q.y, v[4 * k + 2] = q.z, v[4 * k + 3] = q.w;
    }
    eidx = edge_index(r, lane);
    if (eidx >= 0) ev = load1<STREAM>(xr + eidx);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = lane + k * TPR;
      v[k] = j < cols ? load1<STREAM>(xr + j) : -INFINITY;
    }
  }

  float m = ev;
#pragma unroll
  for (int k = 0; k < N; ++k) m = max_ignoring_nan(m, v[k]);
  float c;
  if constexpr (TWO_ROUND) {
#pragma unroll
    for (int off = TPR / 2; off > 0; off /= 2)
      m = max_ignoring_nan(m, __shfl_xor_sync(mask, m, off, TPR));
    // Row max M: +inf or an all -inf row make x - M NaN, a NaN stays NaN: the sum is NaN and
    // so is the row; padding (-inf) of a finite row gives exp(-inf) = 0.
    float s = exp_in_place_sum(v, ev, m);
#pragma unroll
    for (int off = TPR / 2; off > 0; off /= 2) s += __shfl_xor_sync(mask, s, off, TPR);
    c = __fdividef(1.f, s);  // s in [1, cols] for a finite row, else NaN or 0 (-> NaN)
  } else {
    const float s = exp_in_place_sum(v, ev, shift_of(m));
    const MaxSum t = warp_reduce<TPR>(MaxSum{m, s}, mask);
    c = __fdividef(rescale(m, t.m), t.s);  // all -inf row: 0/0 = NaN; NaN or +inf: S is NaN
  }

  if constexpr (VEC == 4) {
    // y rows share x rows' alignment
    store_scaled4<NV, STREAM>(reinterpret_cast<float4*>(yr + r.head), v, c, lane, TPR, r.body);
    if (eidx >= 0) store1<STREAM>(yr + eidx, ev * c);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = lane + k * TPR;
      if (j < cols) store1<STREAM>(yr + j, v[k] * c);
    }
  }
}

// ---- Block: `cluster` blocks per row (1 = a plain block per row), row in registers. Block
// `rank` of a row's cluster holds a contiguous slice of the row; rank 0 also the head/tail.
template <int NV, int VEC, bool STREAM>
__global__ void fused_block_kernel(const float* x, float* y, int64_t rows, int cols, int cluster) {
  __shared__ MaxSum scratch[33];
  __shared__ MaxSum total;
  const int tid = threadIdx.x, T = blockDim.x;
  const int64_t row = blockIdx.x / cluster;  // grid = rows * cluster exactly: no early exit
  const int rank = static_cast<int>(blockIdx.x % cluster);
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  constexpr int N = 4 * NV;
  float v[N];
  float ev = -INFINITY;
  int eidx = -1;
  int begin, end;
  RowSplit r{0, 0, 0};
  if constexpr (VEC == 4) {
    r = split_row(xr, cols);
    const int per = (r.body + cluster - 1) / cluster;
    begin = rank * per;
    end = min(r.body, begin + per);
    const float4* xb = reinterpret_cast<const float4*>(xr + r.head);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = begin + tid + k * T;
      const float4 q = j < end ? load4<STREAM>(xb + j)
                               : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      v[4 * k] = q.x, v[4 * k + 1] = q.y, v[4 * k + 2] = q.z, v[4 * k + 3] = q.w;
    }
    eidx = rank == 0 ? edge_index(r, tid) : -1;
    if (eidx >= 0) ev = load1<STREAM>(xr + eidx);
  } else {
    const int per = (cols + cluster - 1) / cluster;
    begin = rank * per;
    end = min(cols, begin + per);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = begin + tid + k * T;
      v[k] = j < end ? load1<STREAM>(xr + j) : -INFINITY;
    }
  }

  float m = ev;  // linear chains: the block variant is bandwidth-bound, and a tree costs registers
#pragma unroll
  for (int k = 0; k < N; ++k) m = max_ignoring_nan(m, v[k]);
  const float s = exp_in_place_sum(v, ev, shift_of(m));

  MaxSum b = block_reduce(MaxSum{m, s}, scratch);  // scratch[32] = this block's pair
  if (cluster > 1) b = cluster_allreduce(&scratch[32], &total, cluster);
  const float c = __fdividef(rescale(m, b.m), b.s);  // S in [1, cols] unless NaN or 0 (-> NaN)

  if constexpr (VEC == 4) {
    store_scaled4<NV, STREAM>(reinterpret_cast<float4*>(yr + r.head), v, c, begin + tid, T, end);
    if (eidx >= 0) store1<STREAM>(yr + eidx, ev * c);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int j = begin + tid + k * T;
      if (j < end) store1<STREAM>(yr + j, v[k] * c);
    }
  }
  if (cluster > 1) cluster_wait();  // keep scratch alive until every block has read it
}

// ---- Smem: a block per row, the row staged in dynamic shared memory (cols*4 + 16 bytes).
// Each thread touches only the slots it loaded, so only the reduction synchronises.
template <int VEC, bool STREAM>
__global__ void fused_smem_kernel(const float* x, float* y, int64_t rows, int cols, int unused) {
  extern __shared__ float4 buf[];
  __shared__ MaxSum scratch[33];
  const int tid = threadIdx.x, T = blockDim.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY, ev = -INFINITY, s = 0.f;
  int eidx = -1;
  if constexpr (VEC == 4) {
    const RowSplit r = split_row(xr, cols);
    const float4* xb = reinterpret_cast<const float4*>(xr + r.head);
#pragma unroll 4
    for (int j = tid; j < r.body; j += T) {
      const float4 q = load4<STREAM>(xb + j);
      buf[j] = q;
      m = max_ignoring_nan(max_ignoring_nan(m, q.x), max_ignoring_nan(q.y, max_ignoring_nan(q.z, q.w)));
    }
    eidx = edge_index(r, tid);
    if (eidx >= 0) ev = load1<STREAM>(xr + eidx);
    m = max_ignoring_nan(m, ev);
    const float sh = shift_of(m);
    for (int j = tid; j < r.body; j += T) {
      float4 q = buf[j];
      q.x = exp_le0(q.x - sh), q.y = exp_le0(q.y - sh), q.z = exp_le0(q.z - sh), q.w = exp_le0(q.w - sh);
      s += (q.x + q.y) + (q.z + q.w);
      buf[j] = q;
    }
    ev = exp_le0(ev - sh);
    s += ev;
    const MaxSum b = block_reduce(MaxSum{m, s}, scratch);
    const float c = rescale(m, b.m) / b.s;
    float4* yb = reinterpret_cast<float4*>(yr + r.head);
#pragma unroll 4
    for (int j = tid; j < r.body; j += T) {
      const float4 q = buf[j];
      store4<STREAM>(yb + j, make_float4(q.x * c, q.y * c, q.z * c, q.w * c));
    }
    if (eidx >= 0) store1<STREAM>(yr + eidx, ev * c);
  } else {
    float* fb = reinterpret_cast<float*>(buf);
#pragma unroll 4
    for (int j = tid; j < cols; j += T) {
      const float q = load1<STREAM>(xr + j);
      fb[j] = q;
      m = max_ignoring_nan(m, q);
    }
    const float sh = shift_of(m);
    for (int j = tid; j < cols; j += T) {
      const float e = exp_le0(fb[j] - sh);
      s += e;
      fb[j] = e;
    }
    const MaxSum b = block_reduce(MaxSum{m, s}, scratch);
    const float c = rescale(m, b.m) / b.s;
#pragma unroll 4
    for (int j = tid; j < cols; j += T) store1<STREAM>(yr + j, fb[j] * c);
  }
}

// ---- Online: a block per row of any length. First read: each thread keeps a running (m, s),
// rescaling s when its max grows (once per float4); one reduction; second read writes
// exp(x - M) / S. The first read uses default caching so that the second can hit L2.
template <int VEC, bool STREAM>
__global__ void fused_online_kernel(const float* x, float* y, int64_t rows, int cols, int unused) {
  __shared__ MaxSum scratch[33];
  const int tid = threadIdx.x, T = blockDim.x;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  MaxSum a{-INFINITY, 0.f};
  auto add4 = [&](float4 q) {
    const float M = max_ignoring_nan(a.m, max_ignoring_nan(max_ignoring_nan(q.x, q.y), max_ignoring_nan(q.z, q.w)));
    const float sh = shift_of(M);
    a.s = a.s * rescale(a.m, M) + ((exp_le0(q.x - sh) + exp_le0(q.y - sh)) + (exp_le0(q.z - sh) + exp_le0(q.w - sh)));
    a.m = M;
  };
  RowSplit r{0, 0, 0};
  int eidx = -1;
  if constexpr (VEC == 4) {
    r = split_row(xr, cols);
    const float4* xb = reinterpret_cast<const float4*>(xr + r.head);
#pragma unroll 4
    for (int j = tid; j < r.body; j += T) add4(xb[j]);
    eidx = edge_index(r, tid);
    if (eidx >= 0) add4(make_float4(xr[eidx], -INFINITY, -INFINITY, -INFINITY));
  } else {
#pragma unroll 4
    for (int j = tid; j < cols; j += T) add4(make_float4(xr[j], -INFINITY, -INFINITY, -INFINITY));
  }
  const MaxSum b = block_reduce(a, scratch);
  const float sh = shift_of(b.m);
  const float inv = 1.f / b.s;  // all -inf: exp(-inf) * (1/0) = 0 * inf = NaN
  if constexpr (VEC == 4) {
    const float4* xb = reinterpret_cast<const float4*>(xr + r.head);
    float4* yb = reinterpret_cast<float4*>(yr + r.head);
#pragma unroll 4
    for (int j = tid; j < r.body; j += T) {
      const float4 q = load4<STREAM>(xb + j);
      store4<STREAM>(yb + j, make_float4(exp_le0(q.x - sh) * inv, exp_le0(q.y - sh) * inv,
                                         exp_le0(q.z - sh) * inv, exp_le0(q.w - sh) * inv));
    }
    if (eidx >= 0) store1<STREAM>(yr + eidx, exp_le0(load1<STREAM>(xr + eidx) - sh) * inv);
  } else {
#pragma unroll 4
    for (int j = tid; j < cols; j += T) store1<STREAM>(yr + j, exp_le0(load1<STREAM>(xr + j) - sh) * inv);
  }
}

// Tables (nullptr where not compiled): softmax_fused_rows.cu (one-round reduction),
// softmax_fused_rows2.cu (two rounds), softmax_fused_block.cu and softmax_fused_bulk.cu.
FusedKernel rows_kernel(int tpr, int nv, int vec, bool streaming, bool two_round);
FusedKernel rows_kernel_one_round(int tpr, int nv, int vec, bool streaming);
FusedKernel rows_kernel_two_round(int tpr, int nv, int vec, bool streaming);
FusedKernel block_kernel(int nv, int vec, bool streaming);
FusedKernel smem_kernel(int vec, bool streaming);
FusedKernel online_kernel(int vec, bool streaming);
FusedKernel bulk_kernel(bool streaming);  // 16-byte accesses only

// The compiled nv values, as an X-macro for the tables (must match kFusedNvChoices).
#define MINIGPT_FUSED_NV_CASES(F) F(1) F(2) F(3) F(4) F(5) F(6) F(8) F(10) F(12) F(16)

// The Rows table for one reduction kind; each .cu that includes it instantiates one TWO.
template <int TPR, int VEC, bool S, bool TWO>
FusedKernel rows_by_nv(int nv) {
  if constexpr (VEC == 4 && TPR < 8) {
    return nullptr;
  } else {
    switch (nv) {
#define MINIGPT_CASE(NV) \
  case NV: return &fused_rows_kernel<TPR, NV, VEC, S, TWO>;
      MINIGPT_FUSED_NV_CASES(MINIGPT_CASE)
#undef MINIGPT_CASE
      default: return nullptr;
    }
  }
}
template <int TPR, bool TWO>
FusedKernel rows_by_mode(int nv, int vec, bool s) {
  if (vec == 4) return s ? rows_by_nv<TPR, 4, true, TWO>(nv) : rows_by_nv<TPR, 4, false, TWO>(nv);
  if (vec == 1) return s ? rows_by_nv<TPR, 1, true, TWO>(nv) : rows_by_nv<TPR, 1, false, TWO>(nv);
  return nullptr;
}
template <bool TWO>
FusedKernel rows_table(int tpr, int nv, int vec, bool s) {
  switch (tpr) {
    case 4: return rows_by_mode<4, TWO>(nv, vec, s);
    case 8: return rows_by_mode<8, TWO>(nv, vec, s);
    case 16: return rows_by_mode<16, TWO>(nv, vec, s);
    case 32: return rows_by_mode<32, TWO>(nv, vec, s);
    default: return nullptr;
  }
}

}  // namespace minigpt::cuda::detail
