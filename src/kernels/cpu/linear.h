// Linear layer on the CPU: y = x W^T + b, as nn.Linear, and its backward.
//
// Shapes: x (N, in), W (out, in), b (out) or null, y (N, out). N is every leading dimension
// flattened (B*T). Row-major, contiguous.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

// Work fused into the forward's store, so the (N, out) result is written once and not re-read:
struct LinearEpilogue {
  const float* residual = nullptr;  // (N, out): y = residual + (x W^T + b); may be y itself
  bool gelu = false;                // y = GELU(x W^T + b) (gelu.h, float)
  float* gelu_grad = nullptr;       // with gelu: GELU'(x W^T + b) here, the backward's factor
};

// y (N, out) = x (N, in) @ W^T + b, then the epilogue. The sum over `in` is finished before b
// is added (as BLAS with beta = 1), then the residual: y = (x W^T + b) + residual.
void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t N,
                    int64_t in, int64_t out, ThreadPool& pool, const LinearEpilogue& ep = {});

// Inference with weights packed once (the forward packs W^T on every call otherwise, ~1/3 of
// the time of a (32, 64) x (64, 600) product). packed holds linear_packed_floats(in, out)
// floats; linear_pack_weights fills it from W (out, in); linear_forward_packed then gives the
// same y as linear_forward, bitwise, for any N and thread count. The packed layout is private
// to linear.cpp and depends on active_isa() (core/isa.h): gemm_avx512's panels, or W^T
// (in, out) for OpenBLAS and the scalar loops; repack after W changes. The packed forward is
// its own code path on every ISA and reads only the packing, except where
// linear_packed_reads_weights(N): decode (N < 4) on avx512 and avx2, which reads W's rows as
// linear_forward does.
int64_t linear_packed_floats(int64_t in, int64_t out);
void linear_pack_weights(const float* W, float* packed, int64_t in, int64_t out);
void linear_forward_packed(const float* x, const float* W, const float* packed, const float* b,
                           float* y, int64_t N, int64_t in, int64_t out, ThreadPool& pool,
                           const LinearEpilogue& ep = {});
bool linear_packed_reads_weights(int64_t N);

// Given dy (N, out): dx (N, in) = dy @ W (overwritten; skipped if dx is null),
// dW (out, in) += dy^T @ x, db (out) += column sums of dy (skipped if db is null).
// dx_scale (N, in), optional: dx = (dy @ W) * dx_scale elementwise, fused into dx's store: the
// backward through a GELU that produced x, given the GELU' saved by the forward
// (LinearEpilogue::gelu_grad).
void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t N, int64_t in, int64_t out, ThreadPool& pool,
                     const float* dx_scale = nullptr);

// Plain triple-loop reference in double, for tests: y = x W^T + b.
void linear_reference(const float* x, const float* W, const float* b, float* y, int64_t N,
                      int64_t in, int64_t out);

}  // namespace minigpt::cpu
