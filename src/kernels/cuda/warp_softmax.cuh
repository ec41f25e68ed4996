// Device helper of the whole-layer kernels' attention (gpt_layer.cu, gpt_mega_parts.cuh): the softmax of
// one row of scores in shared memory, in place, by one warp: lanes take p = lane, lane + 32, ...;
// the max, then the sum of exp(s - max) (xor-shuffle reductions), then each value times 1/sum.
// The whole warp must call it. Device code only.
#pragma once

#include <math_constants.h>

namespace minigpt::cuda {

__device__ __forceinline__ void warp_softmax_inplace(float* row, int n) {
  const int lane = threadIdx.x & 31;
  float m = -CUDART_INF_F;
  for (int p = lane; p < n; p += 32) m = fmaxf(m, row[p]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
  for (int p = lane; p < n; p += 32) {
    const float e = expf(row[p] - m);
    row[p] = e;
    sum += e;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float inv = 1.0f / sum;
  for (int p = lane; p < n; p += 32) row[p] *= inv;
}

}  // namespace minigpt::cuda
