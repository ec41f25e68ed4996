// LayerNorm over the last dimension, as nn.LayerNorm (biased variance, eps inside the sqrt),
// and its backward.
//
// Shapes: x, y (N, C); weight, bias (C); mean, rstd (N) saved for the backward (may be null
// at inference). A constant row normalises to exactly 0 (then + bias): docs/ARCHITECTURE.md.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t C, float eps,
                       ThreadPool& pool);

// dx (N, C) overwritten; dweight, dbias (C) accumulated (+=).
void layernorm_backward(const float* dy, const float* x, const float* weight, const float* mean,
                        const float* rstd, float* dx, float* dweight, float* dbias, int64_t N,
                        int64_t C, ThreadPool& pool);

}  // namespace minigpt::cpu
