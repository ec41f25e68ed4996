// Thread-block-cluster helpers of the fused softmax: the cluster barrier and the all-reduce of
// the blocks' (max, sum) pairs through distributed shared memory. Device code only (sm_90);
// the kernels that use them are in softmax_fused_kernels.cuh and softmax_fused_bulk.cuh.
//
// The exchange pulls: after a cluster barrier each block reads every block's pair through
// distributed shared memory and combines them in rank order, then arrives on the barrier again;
// each block waits on that second phase only just before it exits (its pair must stay alive
// until every block has read it). Measured on the H200 (2048 x 50257, 8-block clusters): a push
// exchange that lets each block leave right after its stores was 10% slower (probably because
// the blocks of a cluster then leave at different times and a new cluster needs its 8 slots
// free at once; not verified further).
#pragma once

#include "kernels/cuda/softmax_common.cuh"

#include <cuda_runtime.h>

namespace minigpt::cuda::detail {

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Reads a MaxSum from the shared memory of block `rank` of this cluster.
__device__ __forceinline__ MaxSum load_remote(const MaxSum* local, unsigned rank) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  float m, s;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(m) : "r"(remote) : "memory");
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(s) : "r"(remote + 4) : "memory");
  return {m, s};
}

// The cluster's pair from every block's `mine` (this block's pair, in shared memory, written
// and visible to the block: block_reduce leaves it in scratch[32]); every thread of every block
// calls it and gets the same (M, S) (same combine order everywhere). `total` is one shared slot.
// Afterwards the block must call cluster_wait() once before it exits (see the file comment).
__device__ __forceinline__ MaxSum cluster_allreduce(const MaxSum* mine, MaxSum* total, int cluster) {
  cluster_arrive();  // every block's pair is written ...
  cluster_wait();    // ... and visible before anyone reads it
  if (threadIdx.x < 32) {
    MaxSum w = static_cast<int>(threadIdx.x) < cluster ? load_remote(mine, threadIdx.x) : MaxSum{-INFINITY, 0.f};
    w = warp_reduce<32>(w, 0xffffffffu);
    if (threadIdx.x == 0) *total = w;
  }
  __syncthreads();
  const MaxSum t = *total;
  cluster_arrive();  // done reading the other blocks: they may leave once all have arrived
  return t;
}

}  // namespace minigpt::cuda::detail
