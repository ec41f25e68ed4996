// The Bulk variant of the fused softmax: long rows staged in shared memory by the copy engine
// (cp.async.bulk, sm_90), a block or a cluster of blocks per row. Device code only; the launch
// table is in softmax_fused_bulk.cu, the launcher in softmax_fused.cu.
//
// Why: the register variants (Block) hold at most ~60% of the register file as row data, so a
// 50257-float row needs a cluster of blocks and a cluster exchange; a block here asks for its
// whole slice of the row (up to the 227 KB opt-in limit) with a few bulk copies from one warp,
// with ~30 registers per thread. At (2048, 50257) one block per row and per SM (201 KB, no
// cluster) is the autotuner's pick: 89-91% of the copy bandwidth against 80-83% for the best
// Block cluster (bench softmax on the H200).
//
// One block (rank k of a cluster of C) per slice: the 16-byte aligned body of the row split in
// C contiguous slices of ceil(body / C) float4; rank 0 also holds the <= 6 head/tail floats (one
// per thread, plain loads). Each thread works on its own float4s of the slice in shared memory
// (see the kernel for the passes); after the block (and cluster) reduction of the threads'
// (max, sum) pairs it stores exp(x - M) / S with 16-byte stores. x and y must have the same
// offset from a 16-byte boundary (the launcher falls back to Online otherwise). y may alias x:
// each block reads its whole slice before any block of its row writes (the reduction is a
// barrier for the cluster), and writes only its own slice.
//
// Measured on the H200 and left out (slower at (2048, 50257)): an L2 evict-first hint on the
// bulk loads (-6%), an L2 prefetch of the row one wave ahead (-30%), pass 3 through shared
// memory and bulk stores (-9%), a persistent double-buffered version (-5%), chunked passes with
// a per-chunk online (max, sum) and no write-back (-11%).
#pragma once

#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/softmax_cluster.cuh"
#include "kernels/cuda/softmax_common.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace minigpt::cuda::detail {

// The slice is requested as chunks of kBulkChunk float4 (32 KB), each completing on its own
// mbarrier; a block's slice is at most 227 KB, so at most 8 chunks.
inline constexpr int kBulkChunk = 2048;
inline constexpr int kBulkMaxChunks = 8;

// Passes 1 and 2 run chunk by chunk as the copies land, against the thread's running max m: the
// chunk's max, then e = exp(x - m) written back in place and added to the running sum (rescaled
// when m grows). The shift each chunk used is kept (one register per chunk) and pass 3, after
// the block (and cluster) reduction of the (m, s) pairs, stores e * exp(shift - M) / S. The
// exps (the SFU's 16 per clock per SM) so run while later chunks are still in flight: measured
// on the H200 at (2048, 50257), 1.3% faster than the max over every chunk first and the exps
// after the last one (the version before this one; 3% faster than computing each exp twice).
template <bool STREAM>
__global__ void fused_bulk_kernel(const float* x, float* y, int64_t rows, int cols, int cluster) {
  extern __shared__ float4 slice[];  // this block's float4s of the body; x, then exp(x - shift)
  __shared__ MaxSum scratch[33];
  __shared__ MaxSum total;
  __shared__ uint64_t bars[kBulkMaxChunks];
  const int tid = threadIdx.x, T = blockDim.x;
  const int64_t row = blockIdx.x / cluster;  // grid = rows * cluster exactly
  const int rank = static_cast<int>(blockIdx.x % cluster);
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  const RowSplit r = split_row(xr, cols);
  const int per = (r.body + cluster - 1) / cluster;
  const int begin = min(r.body, rank * per);
  const int n = min(r.body - begin, per);
  const int chunks = (n + kBulkChunk - 1) / kBulkChunk;  // <= kBulkMaxChunks (fits() checks)

  // Thread c < chunks owns chunk c: its barrier, and the copy that completes it.
  if (tid < chunks) mbarrier_init(&bars[tid]);
  __syncthreads();
  if (tid < chunks) {
    const int lo = tid * kBulkChunk;
    const unsigned bytes = static_cast<unsigned>(min(kBulkChunk, n - lo)) * 16u;
    mbarrier_arrive_expect_tx(&bars[tid], bytes);
    bulk_load(slice + lo, reinterpret_cast<const float4*>(xr + r.head) + begin + lo, bytes, &bars[tid]);
  }
  const int eidx = rank == 0 ? edge_index(r, tid) : -1;
  const float ev = eidx >= 0 ? load1<STREAM>(xr + eidx) : -INFINITY;

  // The edge element at its own shift: 1 for a finite ev, 0 for -inf, NaN for NaN or +inf
  // (which then stays in every sum it enters, as does a NaN read below).
  const float eev = exp_le0(ev - shift_of(ev));
  float m = ev, s = eev;  // s = sum of exp(x - shift_of(m)) over what this thread has seen
  float shifts[kBulkMaxChunks];  // the raw running max chunk c was shifted by
#pragma unroll
  for (int c = 0; c < kBulkMaxChunks; ++c) {
    shifts[c] = -INFINITY;
    if (c < chunks) {
      mbarrier_wait(&bars[c], 0);
      const int lo = c * kBulkChunk, hi = min(n, lo + kBulkChunk);
      float M = m;
      for (int j = lo + tid; j < hi; j += T) {
        const float4 q = slice[j];
        M = max_ignoring_nan(M, max_ignoring_nan(max_ignoring_nan(q.x, q.y), max_ignoring_nan(q.z, q.w)));
      }
      const float sh = shift_of(M);
      float sc = 0.f;
      for (int j = lo + tid; j < hi; j += T) {
        float4 q = slice[j];
        q.x = exp_le0(q.x - sh), q.y = exp_le0(q.y - sh), q.z = exp_le0(q.z - sh), q.w = exp_le0(q.w - sh);
        sc += (q.x + q.y) + (q.z + q.w);
        slice[j] = q;
      }
      s = s * rescale(m, M) + sc;  // m = -inf: s was 0 (or NaN) and stays so
      m = M;
      shifts[c] = M;
    }
  }
  MaxSum b = block_reduce(MaxSum{m, s}, scratch);  // scratch[32] = this block's pair
  if (cluster > 1) b = cluster_allreduce(&scratch[32], &total, cluster);
  // Pass 3: y = e * exp(shift - M) / S. A chunk shifted by -inf holds only exp(-inf) = 0s; an
  // all -inf row has S = 0, so 0 * (0/0) = NaN; NaN or +inf made S NaN.
  float4* dst = reinterpret_cast<float4*>(yr + r.head) + begin;  // y rows share x rows' alignment
#pragma unroll
  for (int c = 0; c < kBulkMaxChunks; ++c) {
    if (c < chunks) {
      const float f = __fdividef(rescale(shifts[c], b.m), b.s);
      const int lo = c * kBulkChunk, hi = min(n, lo + kBulkChunk);
      for (int j = lo + tid; j < hi; j += T) {
        const float4 q = slice[j];
        store4<STREAM>(dst + j, make_float4(q.x * f, q.y * f, q.z * f, q.w * f));
      }
    }
  }
  if (eidx >= 0) store1<STREAM>(yr + eidx, eev * __fdividef(rescale(ev, b.m), b.s));
  if (cluster > 1) cluster_wait();  // keep scratch alive until every block has read it
}

}  // namespace minigpt::cuda::detail
