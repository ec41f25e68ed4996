// Device helper of LayerNorm for kernels that fuse it (layernorm.cu, linear.cu): one warp's
// statistics of one row, as the CPU computes them (kernels/cpu/layernorm.cpp): in double, two
// passes (mean, then the mean of squared deviations), so a constant row has a mean equal to its
// value and normalises to exactly 0. The row is read from global memory (cached) twice.
#pragma once

#include <cstdint>

namespace minigpt::cuda {

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Every lane of the calling warp gets the row's mean and 1/sqrt(var + eps), rounded to float as
// the CPU rounds them. The whole warp must call it.
__device__ __forceinline__ void warp_row_stats(const float* xr, int64_t C, float eps, float& mean,
                                               float& rstd) {
  const int lane = threadIdx.x & 31;
  double s = 0.0;
  for (int64_t c = lane; c < C; c += 32) s += xr[c];
  const double m = warp_sum_double(s) / static_cast<double>(C);
  double q = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double d = static_cast<double>(xr[c]) - m;
    q += d * d;
  }
  const double var = warp_sum_double(q) / static_cast<double>(C);
  mean = static_cast<float>(m);
  rstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
}

}  // namespace minigpt::cuda
