// Linear layer on the CPU: y = x W^T + b, as nn.Linear, and its backward.
//
// Shapes: x (N, in), W (out, in), b (out) or null, y (N, out). N is every leading dimension
// flattened (B*T). Row-major, contiguous.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

// y (N, out) = x (N, in) @ W^T + b
void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t N,
                    int64_t in, int64_t out, ThreadPool& pool);

// Given dy (N, out): dx (N, in) = dy @ W (overwritten; skipped if dx is null),
// dW (out, in) += dy^T @ x, db (out) += column sums of dy (skipped if db is null).
void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t N, int64_t in, int64_t out, ThreadPool& pool);

// Plain triple-loop reference in double, for tests: y = x W^T + b.
void linear_reference(const float* x, const float* W, const float* b, float* y, int64_t N,
                      int64_t in, int64_t out);

}  // namespace minigpt::cpu
