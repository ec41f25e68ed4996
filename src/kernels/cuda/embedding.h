// Token + position embedding on the GPU, fp32: x (B*T, C) = wte[ids] + wpe[positions].
// The CPU reference is the embed loop of model/gpt.cpp (x = wte[id] + wpe[t], one add).
//
// ids are checked on the host before they are uploaded (model/gpt.cpp's check_ids); a kernel
// that still meets an id outside [0, V) or a position outside [0, P) writes a NaN row, never
// reads out of bounds. B == 0 launches nothing. Launchers check their arguments and the launch
// error (minigpt::Error) and never synchronise; nothing is read from globals.
// Backward: embedding_backward, below.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

// Forward over a batch: x[b*T + t] = wte[ids[b*T + t]] + wpe[t]. wte (V, C), wpe (P, C), T <= P.
void embedding_forward(const int32_t* ids, const float* wte, const float* wpe, float* x,
                       int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, cudaStream_t stream);

// One decode row whose token and position are read on the device (so a captured CUDA graph
// replays with new values): x (C) = wte[*id] + wpe[*pos].
void embedding_decode(const int32_t* id, const int32_t* pos, const float* wte, const float* wpe,
                      float* x, int64_t C, int64_t V, int64_t P, cudaStream_t stream);

// Backward (embedding_backward.cu) without atomics: dx (B*T, C) the gradient at x, ids (B*T)
// on the device. dwte (V, C) and dwpe (P, C) overwritten: row v of dwte sums the rows of dx
// whose id is v in increasing position order, row t of dwpe the rows at position t over the
// batch in order (rows t >= T are 0); in float, as the CPU's serial scatter-add: the same bits.
void embedding_backward(const float* dx, const int32_t* ids, float* dwte, float* dwpe, int64_t B,
                        int64_t T, int64_t C, int64_t V, int64_t P, cudaStream_t stream);

}  // namespace minigpt::cuda
