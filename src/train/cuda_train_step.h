// CudaTrainStep: the whole training step of GrammarMiniGPT on one GPU, for one batch shape
// (B, T): forward saving the activations, cross-entropy, backward, global-norm clipping and
// AdamW, captured once as a CUDA graph and replayed every step.
//
// Memory: one CudaArena allocated by the constructor holds everything: the parameters, their
// gradients and the two AdamW moments (each ONE flat fp32 buffer in the order of
// ModelWeights::named(), tensors at 256-byte aligned offsets, padding kept 0), the saved
// activations, the backward's scratch and the batch. Nothing is allocated inside a step.
//
// The graph: batch H2D (ids, targets and this step's AdamW constants, from pinned memory) ->
// forward (kernels/cuda: embedding, layernorm, fused Linear with bias/GELU/residual epilogues,
// attention) -> cross-entropy -> backward (the backward launchers beside each op's forward in kernels/cuda/*.h; matmul gradients through
// cuBLAS, pedantic fp32; [stage hook] after each group) -> [grad hook] -> grad norm + clip + AdamW (kernels/cuda/optimizer.h)
// with, beside AdamW, the loss and norm D2H into pinned memory. The lr, the bias corrections and the step count
// change every step: the host writes them into the pinned batch before each replay, so the
// replays are exact (the constants are computed on the host as adamw_update computes them).
//
// Side streams: the work off the chain of data gradients (cuBLAS dx, layernorm/attention/GELU
// backward) runs beside it on MINIGPT_TRAIN_SIDE_STREAMS (default 2) side streams, taken in
// turn: the weight gradients (linear_backward_weights, the split-row dW/db kernel), the
// LayerNorms' parameter gradients (layernorm_backward_params over the partials the data
// kernel leaves), the loss's mean and the results' copy. Each weight gradient's launch gives an
// event the chain waits for only before it overwrites that launch's input; the residual
// gradient alternates between two buffers so that such a wait comes a half block later; one
// join at the backward's end (and at each stage's end with a stage hook). Same kernels, same
// bits. MINIGPT_TRAIN_OVERLAP=0 in the environment keeps one stream (to measure against).
// H200, B=64 T=16, one run (bench train --steps 300 --warmup 30, three rounds alternating):
// step 0.556 -> 0.434 ms median (1.84M -> 2.36M tokens/s); phases forward 205 -> 192 us,
// backward 312 -> 223 us, clip + AdamW 14.0 -> 9.5 us; one side stream 0.476 ms, three 0.437,
// one stream 0.606. Tried and removed, slower: programmatic dependent launch on the step's
// kernels (forward 204 -> 238 us), dx through linear_forward's kernel with GELU' fused instead
// of cuBLAS (backward 314 -> 404 us), the forward's LayerNorms as the Linear's prologue
// (forward 214 -> 238 us: every column block recomputes its rows' statistics).
//
// Data parallel (issue 16): set_stage_hook's function is called while the graph is captured,
// each time the backward has enqueued the last kernel of a group of gradients (the head, each
// block, the embeddings: GrammarMiniGPT::backward's stages), and set_grad_hook's between the
// backward and the norm; both get the step's stream, so an all-reduce forked from there (a
// bucket's, on a communication stream) or enqueued on it becomes part of the graph.
//
// Numerics (H200): gradients within 3.3e-6 relative per tensor of the CPU engine's backward
// (sums in another order), weights after 50 steps within 7e-6; AdamW the CPU's operations in
// its order. Deterministic: no float atomics (only the counters that pick a reduction's last
// block), fixed reduction orders, so two runs give the same bits. A non-finite gradient norm (or loss) leaves the
// weights as they were and step() throws Error ("training diverged").
//
// Built in every configuration: without CUDA, or without a visible GPU, the constructor throws
// Error saying so. Not thread-safe.
#pragma once

#include "model/config.h"
#include "model/weights.h"
#include "train/adamw.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace minigpt {

struct CudaStepResult {
  float loss = 0.0f;       // mean cross-entropy of the batch (before the update)
  double grad_norm = 0.0;  // before clipping
  float gpu_ms = 0.0f;     // the graph's time on the GPU (CUDA events around the replay)
};

class CudaTrainStep {
 public:
  // Error if CUDA is unavailable, T > block_size, the head size is not supported by the
  // attention kernels, or the arena does not fit on the GPU (naming the bytes).
  CudaTrainStep(const ModelConfig& config, const AdamWConfig& adamw, float grad_clip, int64_t B,
                int64_t T);
  ~CudaTrainStep();
  CudaTrainStep(const CudaTrainStep&) = delete;
  CudaTrainStep& operator=(const CudaTrainStep&) = delete;

  int64_t batch() const;
  int64_t seq() const;

  // Host <-> device copies of the parameters and AdamW moments (synchronous).
  void upload(const ModelWeights& weights, const ModelWeights& m, const ModelWeights& v);
  void download(ModelWeights& weights, ModelWeights& m, ModelWeights& v) const;
  void download_grads(ModelWeights& grads) const;  // the last backward's (before clipping)

  // Forward + backward of one batch without an update, launched eagerly (for tests and
  // evaluation): returns the loss; the gradients stay on the device (download_grads).
  // ids, targets (B*T) host, checked as GrammarMiniGPT::forward_train checks them.
  float forward_backward(const int32_t* ids, const int32_t* targets);

  // One full training step at learning rate lr; t >= 1 is AdamW's step count after this update
  // (bias correction). The first call captures the graph. Waits for the step to finish.
  CudaStepResult step(const int32_t* ids, const int32_t* targets, float lr, int64_t t);

  // Called during the capture (before the first step()) between the backward and the norm:
  // grads is the flat gradient buffer of flat_floats() floats, in the order of
  // ModelWeights::named() with parameter_offsets(); enqueue work on `stream` only.
  using GradHook = std::function<void(float* grads, int64_t floats, cudaStream_t stream)>;
  void set_grad_hook(GradHook hook);
  // Called during the capture as the backward finishes each group of gradients: stage as
  // GrammarMiniGPT::backward's on_ready (kHeadStage, blocks n_layer-1 .. 0, kEmbeddingStage),
  // that group's kernels enqueued on `stream` (record an event there to wait for them; the
  // backward goes on after the call). Work forked from `stream` must be joined back by the grad
  // hook. Neither hook runs in forward_backward() or profile_phases(): only in the step's graph.
  using StageHook = std::function<void(int stage, cudaStream_t stream)>;
  void set_stage_hook(StageHook hook);
  // Replaces the cudaStreamSynchronize with which step() waits for its graph: with an
  // all-reduce in the graph a dead peer would leave that wait hanging, so data parallel
  // passes NcclCommunicator::synchronize (bounded by --dist-timeout; train/cuda_data_parallel.h).
  using StepWait = std::function<void(cudaStream_t stream)>;
  void set_step_wait(StepWait wait);
  int64_t flat_floats() const;
  float* grad_buffer();  // the flat gradient buffer on the device (flat_floats() floats)
  const ModelConfig& config() const;
  std::vector<std::pair<std::string, int64_t>> parameter_offsets() const;  // (name, float offset)
  size_t arena_bytes() const;
  int graph_nodes() const;  // kernels and copies in the captured step (0 before the first step)

  // For benchmarks: each phase of the step captured as its own graph and replayed `reps` times
  // on the batch of the last step() (GPU time per replay, CUDA events). The optimizer phase
  // really updates: call it after the measured steps, on a run whose weights no longer matter.
  struct PhaseTime {
    std::string phase;
    int nodes = 0;
    double us = 0.0;
  };
  std::vector<PhaseTime> profile_phases(int reps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minigpt
