// Instantiations of the Rows variant of the fused softmax with the two-round (max, then sum)
// reduction (softmax_fused_kernels.cuh). Its own file so that nvcc compiles it in parallel.
#include "kernels/cuda/softmax_fused_kernels.cuh"

namespace minigpt::cuda::detail {

FusedKernel rows_kernel_two_round(int tpr, int nv, int vec, bool streaming) {
  return rows_table<true>(tpr, nv, vec, streaming);
}

}  // namespace minigpt::cuda::detail
