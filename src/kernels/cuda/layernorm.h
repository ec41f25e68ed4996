// LayerNorm over the last dimension on the GPU, fp32, as nn.LayerNorm (biased variance, eps
// inside the sqrt). The CPU reference is kernels/cpu/layernorm.h.
//
// Shapes: x, y (N, C); weight, bias (C); mean, rstd (N) saved for the backward (may be null
// at inference). One warp per row, two passes over the row held in registers (mean, then the
// mean of squared deviations), so a constant row normalises to exactly 0 (then + bias).
// N == 0 launches nothing; y may alias x. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t C, float eps,
                       cudaStream_t stream);

}  // namespace minigpt::cuda
