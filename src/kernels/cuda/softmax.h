// Row softmax on the GPU, fp32, (rows, cols) row-major and contiguous: one op, three versions.
// Host-callable launchers; the kernels are in softmax_naive.cu, softmax_smem.cu and
// softmax_fused*.cu. Semantics are the CPU's (docs/ARCHITECTURE.md, kernels/cpu/softmax.h): a row holding
// a NaN or +inf gives a NaN row, an all -inf row gives a NaN row, [1e30, 0, -1e30] gives
// [1, 0, 0]; rows == 0 launches nothing; cols >= 1. y may alias x (each thread reads every
// element it writes before writing it).
//
//   softmax_naive   a thread per row, three passes over global memory (max, sum, write).
//   softmax_smem    a block per row, shared-memory tree reductions, three passes.
//   softmax_fused   one read and one write of each element where the row fits on chip (the
//                   row in registers or shared memory), else an online two-read kernel; the
//                   launch parameters come from a FusedConfig (autotune.h picks one).
//
// Every launcher checks its arguments and the launch error and throws minigpt::Error; none
// synchronises the stream. The context (stream, device pointers, config) is passed in; nothing
// is read from globals.
#pragma once

#include "kernels/cuda/fused_config.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace minigpt::cuda {

void softmax_naive(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
void softmax_smem(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
void softmax_fused(const float* x, float* y, int64_t rows, int64_t cols, const FusedConfig& config,
                   cudaStream_t stream);

// Limits of the current device that decide which fused configs can run.
struct FusedLimits {
  int smem_optin_bytes = 48 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int sm_count = 1;
};
FusedLimits fused_limits();  // of the current device

// A reasonable config without tuning (the autotuner's fallback and first candidate).
FusedConfig fused_default_config(int64_t cols, const FusedLimits& limits);
// Every config the autotuner tries for rows of `cols` floats; each one fits and its kernel can
// launch with its block size (register limits checked with cudaFuncGetAttributes).
std::vector<FusedConfig> fused_candidates(int64_t cols, const FusedLimits& limits);

}  // namespace minigpt::cuda
