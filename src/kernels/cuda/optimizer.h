// The optimizer's half of a training step on the GPU, over ONE flat fp32 buffer holding every
// parameter (and one each for the gradients and the two AdamW moments, same layout):
//
//   grad_norm   the global L2 norm of the gradient buffer and the clip factor, by a
//               deterministic two-stage reduction in double (fixed grid, fixed order; the
//               last block to finish does the second stage: one launch), into a GradNorm
//               on the device;
//   adamw       one multi-tensor launch: clip (g * scale), then the AdamW update of
//               train/adamw.h element by element with the CPU's operations in its order
//               (no fused multiply-adds), so the same bits for the same inputs. Decay per
//               tensor from a segment table. A non-finite norm updates nothing (the host then
//               reports the divergence; the weights stay those before the step).
//
// The per-step constants (lr, bias corrections) are read from device memory (AdamWScalars),
// so a captured graph replays correctly: the host writes them before each replay.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

struct GradNorm {
  double norm;  // before clipping
  float scale;  // max_norm / (norm + 1e-6) when clipping applies, else 1
};

// The constants of one AdamW step, as adamw_update computes them on the host.
struct AdamWScalars {
  float step_size;     // lr / (1 - b1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - b2^t)
  float decay;         // 1 - lr * wd, for the tensors that decay (1 for the others)
  float b1, b2, one_b1, one_b2, eps;
};

// A range [begin, end) of the flat buffer updated with or without weight decay. The adamw
// launch takes a device array of them, each at most kAdamWChunk floats (one block each).
struct AdamWChunk {
  int64_t begin, end;
  int decays;
};
constexpr int64_t kAdamWChunk = 4096;

// Partials: kNormScratch doubles of scratch, all 0 before the first call (the last slot holds
// the counter that picks the block which finishes the sum; every call leaves it 0).
constexpr int kNormBlocks = 264;
constexpr int kNormScratch = kNormBlocks + 1;
void grad_norm(const float* grads, int64_t n, double* partials, float max_norm, GradNorm* out,
               cudaStream_t stream);

void adamw(float* params, const float* grads, float* m, float* v, const AdamWChunk* chunks,
           int64_t n_chunks, const AdamWScalars* scalars, const GradNorm* norm,
           cudaStream_t stream);

}  // namespace minigpt::cuda
