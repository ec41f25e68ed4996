// GELU on the GPU, the exact erf form of nn.GELU(): y = x/2 (1 + erf(x / sqrt 2)), fp32.
// GELU(-inf) = -0, GELU(+inf) = +inf, NaN stays NaN. The CPU reference is kernels/cpu/gelu.h.
// The model's forward fuses GELU into fc1's epilogue (linear.h); this standalone op is the
// tested building block (and what a cuBLAS GEMM is followed by). The device function
// gelu_erf() lives in gelu.cuh for kernels that fuse it.
//
// n == 0 launches nothing; y may alias x. Launchers check their arguments and the launch error
// (minigpt::Error) and never synchronise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);

}  // namespace minigpt::cuda
