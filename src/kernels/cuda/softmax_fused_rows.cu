// Instantiations of the Rows variant of the fused softmax (softmax_fused_kernels.cuh) and the
// table that picks one by (threads per row, nv, vec, cache mode). Its own file so that nvcc
// compiles it beside the Block instantiations.
#include "kernels/cuda/softmax_fused_kernels.cuh"

namespace minigpt::cuda::detail {

namespace {

template <int TPR, int VEC, bool S>
FusedKernel rows_by_nv(int nv) {
  if constexpr (VEC == 4 && TPR < 8) {
    return nullptr;
  } else {
    switch (nv) {
#define MINIGPT_CASE(NV) \
  case NV: return &fused_rows_kernel<TPR, NV, VEC, S>;
      MINIGPT_FUSED_NV_CASES(MINIGPT_CASE)
#undef MINIGPT_CASE
      default: return nullptr;
    }
  }
}

template <int TPR>
FusedKernel rows_by_mode(int nv, int vec, bool s) {
  if (vec == 4) return s ? rows_by_nv<TPR, 4, true>(nv) : rows_by_nv<TPR, 4, false>(nv);
  if (vec == 1) return s ? rows_by_nv<TPR, 1, true>(nv) : rows_by_nv<TPR, 1, false>(nv);
  return nullptr;
}

}  // namespace

FusedKernel rows_kernel(int tpr, int nv, int vec, bool streaming) {
  switch (tpr) {
    case 4: return rows_by_mode<4>(nv, vec, streaming);
    case 8: return rows_by_mode<8>(nv, vec, streaming);
    case 16: return rows_by_mode<16>(nv, vec, streaming);
    case 32: return rows_by_mode<32>(nv, vec, streaming);
    default: return nullptr;
  }
}

}  // namespace minigpt::cuda::detail
