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

// Backward (layernorm_backward.cu), one launch, formulas as the CPU's: x, dy (N, C) with x the
// forward's input (the statistics are recomputed from it in double, as the CPU forward computes
// them), weight (C). dx (N, C) = LN'(dy) when accumulate is false, dx += LN'(dy) when true (the
// residual stream's gradient). dweight, dbias (C) overwritten with sum_n dy * xhat and
// sum_n dy (either may be null), in double in a fixed order; they need the scratch: partial
// (layernorm_backward_scratch(N, C) doubles) and counter (one int, 0 before the first call;
// every call leaves it 0, so one scratch serves the step's LayerNorms one after another on a
// stream, and graph replays).
struct LayerNormGradScratch {
  double* partial = nullptr;
  int* counter = nullptr;
  int64_t partial_doubles = 0;
};
int64_t layernorm_backward_scratch(int64_t N, int64_t C);
void layernorm_backward(const float* dy, const float* x, const float* weight, float* dx,
                        bool accumulate, float* dweight, float* dbias,
                        const LayerNormGradScratch& scratch, int64_t N, int64_t C, float eps,
                        cudaStream_t stream);

// layernorm_backward's two halves, for a caller that runs the parameter gradients off its
// critical path (the training step: on a side stream), together the same bits:
// layernorm_backward_data writes dx (N, C) = add + LN'(dy) (add (N, C) may be dx itself, or
// null for LN'(dy) alone: the residual stream's gradient may move between two buffers) and,
// when partial is not null, each block's partial sums (layernorm_backward_scratch(N, C)
// doubles; no counter, no last-block sum);
// layernorm_backward_params then adds those partials (written by a data call of the same N,
// C) into dweight and dbias (either may be null). A partial buffer must not be written again
// before its params call has run.
void layernorm_backward_data(const float* dy, const float* x, const float* weight, float* dx, const float* add,
                             double* partial, int64_t N, int64_t C, float eps, cudaStream_t stream);
void layernorm_backward_params(const double* partial, float* dweight, float* dbias, int64_t N, int64_t C,
                               cudaStream_t stream);

}  // namespace minigpt::cuda
