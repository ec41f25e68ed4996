// Instantiations of the Rows variant of the fused softmax with the one-round (max, sum) pair
// reduction (softmax_fused_kernels.cuh), and the Rows dispatch over both reduction kinds. Its
// own file so that nvcc compiles it beside the other instantiations.
#include "kernels/cuda/softmax_fused_kernels.cuh"

namespace minigpt::cuda::detail {

FusedKernel rows_kernel_one_round(int tpr, int nv, int vec, bool streaming) {
  return rows_table<false>(tpr, nv, vec, streaming);
}

FusedKernel rows_kernel(int tpr, int nv, int vec, bool streaming, bool two_round) {
  return two_round ? rows_kernel_two_round(tpr, nv, vec, streaming)
                   : rows_kernel_one_round(tpr, nv, vec, streaming);
}

}  // namespace minigpt::cuda::detail
