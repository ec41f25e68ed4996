// Programmatic dependent launch (PDL, Hopper sm_90+) for the kernels of kernels/cuda: a kernel
// launched with pdl = true may start while the kernel before it on the stream still runs; its
// first statement, pdl_prologue(), waits (griddepcontrol.wait) until every prerequisite grid
// has finished and its writes are visible, then lets the next kernel launch early in turn
// (griddepcontrol.launch_dependents). What it saves is the launch latency between dependent
// kernels (microseconds each in a graph of ~100 small kernels).
//
// Safe by construction: every kernel that calls pdl_prologue() first reads and writes nothing
// before the wait, so its predecessor's work is complete; chained, that covers every earlier
// kernel too. Without PDL (pdl = false, or before sm_90) the prologue is a no-op. Kernels of
// other libraries (cuBLAS, NCCL) are never launched with PDL; a PDL kernel after one of them
// simply waits for it. What this file does not do: choose where PDL is used (the caller's
// `pdl` argument: the training step turns it on).
#pragma once

#include <cuda_runtime.h>

namespace minigpt::cuda {

__device__ __forceinline__ void pdl_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// pdl. Returns the launch's error (the caller checks it, as after <<<>>>).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = pdl ? &attr : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace minigpt::cuda
