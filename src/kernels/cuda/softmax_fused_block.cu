// Instantiations of the Block, Smem and Online variants of the fused softmax
// (softmax_fused_kernels.cuh) and the tables that pick one by its parameters.
#include "kernels/cuda/softmax_fused_kernels.cuh"

namespace minigpt::cuda::detail {

namespace {

template <int VEC, bool S>
FusedKernel block_by_nv(int nv) {
  switch (nv) {
#define MINIGPT_CASE(NV) \
  case NV: return &fused_block_kernel<NV, VEC, S>;
    MINIGPT_FUSED_NV_CASES(MINIGPT_CASE)
#undef MINIGPT_CASE
    default: return nullptr;
  }
}

}  // namespace

FusedKernel block_kernel(int nv, int vec, bool s) {
  if (vec == 4) return s ? block_by_nv<4, true>(nv) : block_by_nv<4, false>(nv);
  if (vec == 1) return s ? block_by_nv<1, true>(nv) : block_by_nv<1, false>(nv);
  return nullptr;
}

FusedKernel smem_kernel(int vec, bool s) {
  if (vec == 4) return s ? &fused_smem_kernel<4, true> : &fused_smem_kernel<4, false>;
  if (vec == 1) return s ? &fused_smem_kernel<1, true> : &fused_smem_kernel<1, false>;
  return nullptr;
}

FusedKernel online_kernel(int vec, bool s) {
  if (vec == 4) return s ? &fused_online_kernel<4, true> : &fused_online_kernel<4, false>;
  if (vec == 1) return s ? &fused_online_kernel<1, true> : &fused_online_kernel<1, false>;
  return nullptr;
}

}  // namespace minigpt::cuda::detail
