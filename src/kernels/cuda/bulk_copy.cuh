// Bulk copies by the copy engine (cp.async.bulk, sm_90) completing on an mbarrier: the
// primitives the fused softmax's Bulk variant and the megakernel (gpt_mega.cu) stage their
// shared memory with. Device code only; what each user copies and when it waits is theirs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minigpt::cuda::detail {

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// An mbarrier expecting one arrival; the fence makes its initialisation visible to the copy
// engine (the async proxy) before the first copy names it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The same in two parts, for several barriers behind ONE fence: each init, then the fence once
// (before the first copy or remote arrival names any of them).
__device__ __forceinline__ void mbarrier_init_unfenced(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_address(bar)) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The one arrival, announcing `bytes` that copies will complete (0: the phase completes now).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
// Spins until phase `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}
// Global -> this block's shared memory, `bytes` (a multiple of 16, both ends 16-byte aligned),
// completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar))
      : "memory");
}
// Announces `bytes` more that copies will complete on the barrier, without arriving: lets every
// lane that issues copies count its own (the phase completes after the one arrival as well).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}

}  // namespace minigpt::cuda::detail
