// GELU on the GPU, the exact erf form of nn.GELU(): y = x/2 (1 + erf(x / sqrt 2)), fp32.
// GELU(-inf) = -0, GELU(+inf) = +inf, NaN stays NaN. The CPU reference is kernels/cpu/gelu.h.
// The model's forward fuses GELU into fc1's epilogue (linear.h); this standalone op is the
// tested building block (and what a cuBLAS GEMM is followed by). The device function
// gelu_erf() lives in gelu.cuh for kernels that fuse it.
//
// n == 0 launches nothing; y may alias x. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
// Backward: gelu_backward and gelu_backward_saved, below.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);

// Backward (gelu_backward.cu): dx (n) = dy * GELU'(x), exact erf form (GELU'(-inf) = 0,
// GELU'(+inf) = 1). dx may be dy.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream);
// The same given the GELU' the forward saved (LinearFusion::gelu_grad, linear.h):
// dx (n) = dy * gelu_grad. dx may be dy.
void gelu_backward_saved(const float* gelu_grad, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream);

}  // namespace minigpt::cuda
