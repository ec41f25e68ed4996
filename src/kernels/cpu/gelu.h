// GELU, the exact erf form of nn.GELU(): y = x/2 (1 + erf(x / sqrt 2)), and its backward.
// GELU(-inf) = -0, GELU(+inf) = +inf, NaN stays NaN (docs/ARCHITECTURE.md). Computed in float: within
// ~5e-7 absolute of the exact values (forward and GELU'), see gelu.cpp.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

void gelu_forward(const float* x, float* y, int64_t n, ThreadPool& pool);
// y = GELU(x) and grad = GELU'(x) in one pass (y may be x): what a fused Linear + GELU saves
// for its backward, which then multiplies instead of re-evaluating the CDF. Bitwise equal to
// gelu_forward and gelu_backward with dy = 1.
void gelu_forward_with_grad(const float* x, float* y, float* grad, int64_t n, ThreadPool& pool);
// dx (n) overwritten with dy * GELU'(x).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool& pool);

}  // namespace minigpt::cpu
