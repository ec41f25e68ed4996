// LayerNorm over the last dimension on the GPU, fp32, as nn.LayerNorm (biased variance, eps
// inside the sqrt). The CPU reference is kernels/cpu/layernorm.h.
//
// Shapes: x, y (N, C); weight, bias (C); mean, rstd (N) saved for the backward (may be null
// at inference). One warp per row, two passes over the row held in registers (mean, then the
// mean of squared deviations), so a constant row normalises to exactly 0 (then + bias).
// N == 0 launches nothing; y may alias x. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
// Backward: layernorm_backward, below.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t C, float eps,
                       cudaStream_t stream);

// Backward (layernorm_backward.cu), formulas as the CPU's: x, dy (N, C) with x the forward's
// input (the statistics are recomputed from it in double, as the CPU forward computes them),
// weight (C). dx (N, C) = LN'(dy) when accumulate is false, dx += LN'(dy) when true (the
// residual stream's gradient). mean, rstd (N): scratch written here, read by the weight pass.
// dweight, dbias (C) overwritten with sum_n dy * xhat and sum_n dy (either may be null), in
// double in a fixed order.
void layernorm_backward(const float* dy, const float* x, const float* weight, float* dx,
                        bool accumulate, float* mean, float* rstd, float* dweight, float* dbias,
                        int64_t N, int64_t C, float eps, cudaStream_t stream);

}  // namespace minigpt::cuda
