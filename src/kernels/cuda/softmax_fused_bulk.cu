// Instantiations of the Bulk variant of the fused softmax (softmax_fused_bulk.cuh) and its table.
#include "kernels/cuda/softmax_fused_bulk.cuh"
#include "kernels/cuda/softmax_fused_kernels.cuh"

namespace minigpt::cuda::detail {

FusedKernel bulk_kernel(bool streaming) {
  return streaming ? &fused_bulk_kernel<true> : &fused_bulk_kernel<false>;
}

}  // namespace minigpt::cuda::detail
