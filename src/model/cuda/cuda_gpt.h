// CudaGPT and CudaDecoder: the grammar MiniGPT's inference on one GPU. CudaGPT uploads a
// GrammarMiniGPT's weights once and runs the forward (B, T) -> logits, probs; CudaDecoder is the
// KV-cache decoder (the API of model/decoder.h). The whole forward of a shape and the whole
// decode step are each captured once as a CUDA graph and then replayed; every buffer a graph
// touches is a slot of an arena allocated before the capture, so a call allocates nothing.
//
// Four ways to run it (CudaGPTOptions::path), each tested against the CPU engine:
//   Mega   (default) kernels/cuda/gpt_mega.h: the whole forward, or the whole decode step, as ONE
//          kernel run by a thread-block cluster (weights copied once into its shared memory,
//          activations exchanged through distributed shared memory). Used for every shape whose
//          rows fit (the shipped model: B*T up to ~40, and the decode step); other shapes run
//          Fused (path_for() says which). The forward of the shipped architecture runs split by
//          rows instead where that takes the shape (kernels/cuda/gpt_mega_rows.h: a cluster per
//          sequence, T up to 16 rows per CTA; CudaGPTOptions::mega_rows): H200 (2, 16) 25.6 us
//          against 38.7 us. The decode step gets its token and position as the
//          kernel's arguments (its graph node updated per step) and writes its logits to mapped
//          host memory: no copies in its graph (switches in cuda_gpt.cpp). CudaDecoder::generate
//          runs the megakernel's decode LOOP instead: one launch for all the tokens, each chosen
//          on the GPU (H200: 55.1k tokens/s greedy against step()'s 30k). The default because
//          it measured fastest (H200, experiments/25-compile/REPORT.md 7k: forward (2, 16) 39 us
//          against Fused's 140, a decode step() 33 us against 148; figures and what limits them
//          in docs/MEGAKERNEL.md).
//   Fused  kernels/cuda/gpt_layer.h: per layer (embedding + ln1 + qkv + attention) and
//          (proj + residual + ln2 + fc1 + GELU + fc2 + residual), then (ln_f + lm_head + softmax):
//          9 kernels for the shipped model. Falls back to PerOp where its shared memory does not
//          fit the device (large d_model or context).
//   PerOp  a kernel per op with kernels/cuda/linear.h's fused Linear ((ln1 + qkv), attention,
//          (proj + residual), (ln2 + fc1 + GELU), (fc2 + residual), (ln_f + lm_head)) and the
//          fused softmax (kernels/cuda/softmax.h): 23 kernels.
//   Cublas the Linears as cuBLAS GEMMs (pedantic fp32) with LayerNorm and the epilogues as
//          separate kernels (39 kernels): the reference for timing.
// Numerics: logits within ~1e-5 of the CPU engine (sums over k in another order).
//
// Built in every configuration: without CUDA (or without a visible GPU) constructing a CudaGPT
// throws Error saying so. What it does not do: training (train/), sampling outside generate(),
// several GPUs. Not thread-safe: one caller at a time per object.
#pragma once

#include "core/tensor.h"
#include "model/gpt.h"
#include "model/sampling.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

typedef struct CUstream_st* cudaStream_t;  // as cuda_runtime_api.h declares it

namespace minigpt {

struct CudaGPTOptions {
  enum class Path { Mega, Fused, PerOp, Cublas };
  Path path = Path::Mega;
  // Mega: CTAs per cluster (1..16). 0: automatic: a forward takes the largest that fits (16 on
  // an H200); the decoder times the step at each size that fits and keeps the fastest.
  int mega_cluster = 0;
  // Mega: proj by columns (a stage and a cluster barrier per layer) or by heads (each attention
  // head's partial pushed to every CTA, or with point-to-point stages to the owner of its
  // columns; kernels/cuda/gpt_mega.h). Auto: by heads for the decode step and the point-to-point
  // forwards (the shipped architecture) where that fits, by columns for the other forwards.
  // MINIGPT_MEGA_PROJ=heads|columns in the environment overrides Auto (bench/forward_accuracy.py).
  enum class MegaProj { Auto, Columns, Heads };
  MegaProj mega_proj = MegaProj::Auto;
  // Mega forward split by rows (kernels/cuda/gpt_mega_rows.h: a cluster per sequence, each CTA
  // `mega_rows` rows of it, the weights streamed to every CTA) instead of by weights, for the
  // shapes it takes (the shipped architecture, T <= 16 mega_rows); the others run the plan above.
  // 1, 2 or 4: rows per CTA; 0: never; -1 (automatic, the default): MINIGPT_MEGA_ROWS=0|1|2|4
  // in the environment where set, else the fewest rows per CTA that take the shape (H200, (2, 16):
  // docs/MEGAKERNEL.md "rows"); automatic only while mega_cluster and mega_proj (and
  // MINIGPT_MEGA_PROJ) are too: they name the weight-split plan. The decode step and loop always
  // run the weight-split kernel.
  int mega_rows = -1;
};
const char* path_name(CudaGPTOptions::Path path);  // "mega", "fused", "per-op", "cublas"

// True when this build has CUDA and a GPU is visible.
bool cuda_model_available();
// Why not, for an error message ("built without CUDA", "no CUDA device is visible"); empty if available.
std::string cuda_model_unavailable_reason();

class CudaGPT {
 public:
  // Uploads model's weights (a snapshot: later changes to model are not seen) on the current
  // device. Error if CUDA is unavailable, the config is outside what the kernels support
  // (head dim 8/16/32/64), or the GPU is out of memory (naming the bytes).
  explicit CudaGPT(const GrammarMiniGPT& model, CudaGPTOptions options = {});
  ~CudaGPT();
  CudaGPT(const CudaGPT&) = delete;
  CudaGPT& operator=(const CudaGPT&) = delete;

  const ModelConfig& config() const;
  const CudaGPTOptions& options() const;
  CudaGPTOptions::Path path() const;  // the one running (Fused may have fallen back to PerOp)
  // The path a forward of (B, T) runs: Mega where the megakernel takes the shape, else the
  // fallback (Fused, or PerOp where Fused does not fit). mega_cluster_for: its cluster size, or 0.
  CudaGPTOptions::Path path_for(int64_t B, int64_t T) const;
  int mega_cluster_for(int64_t B, int64_t T) const;
  int mega_rows_for(int64_t B, int64_t T) const;        // the row-split forward's rows per CTA, or 0
  bool mega_head_proj_for(int64_t B, int64_t T) const;  // Mega with proj by heads

  // GrammarMiniGPT::forward's contract: ids (B, T) host, checked; writes host logits and probs
  // (B, T, V), allocating them if undefined or misshapen; B == 0 gives empty outputs. The first
  // call of a (B, T) allocates that shape's arena and captures its graph (the last 8 shapes are
  // kept); later calls copy ids in, replay, copy the outputs back and wait.
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs);

  // For benchmarks and device-side callers: the graph of shape (B >= 1, T), captured if needed.
  // ids (B*T int32), logits and probs (B*T*V floats) are its fixed device slots.
  struct DeviceForward {
    int32_t* ids;
    float* logits;
    float* probs;
  };
  DeviceForward prepare(int64_t B, int64_t T);
  // Enqueues shape (B, T)'s graph on stream() (prepare() first); does not wait.
  void replay(int64_t B, int64_t T);
  cudaStream_t stream() const;

 private:
  friend class CudaDecoder;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CudaDecoder {
 public:
  // Keeps a reference to model (it must outlive the decoder); allocates its arena (the KV cache,
  // one-row scratch) and pinned host buffers, and captures the decode step's graph once: the
  // token and the position are device inputs, so one graph serves every position.
  explicit CudaDecoder(const CudaGPT& model);
  ~CudaDecoder();
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  void reset();  // the next token is position 0
  int64_t position() const;
  int64_t capacity() const;  // block_size

  // As Decoder::step: feeds id at position(), returns the logits (V) (host memory, valid until
  // the next step/prefill/reset). Error if id is outside [0, V) or the context is full; the state
  // is unchanged on error.
  std::span<const float> step(int32_t id);
  // As Decoder::prefill: every id checked and the prompt checked to fit before anything is fed.
  std::span<const float> prefill(std::span<const int32_t> ids);

  // `minigpt generate`'s loop: prefill(prompt) (fed from position(), checked as prefill), then
  // up to n tokens chosen as Sampler(seed).sample(logits, params) would, stopping at `eos` (not
  // kept; -1: no stop token), after n tokens (the n-th fed, as the host loop does) or when the
  // context is full. Where device_loop() says so, the prompt's last token and every chosen one
  // run in ONE launch of the megakernel's decode loop (kernels/cuda/gpt_mega.h: the token
  // chosen on the GPU, no host round trip per token; the sampler's uniforms drawn on the host
  // first from the same std::mt19937_64 stream); else the host loop over step(). The same
  // tokens either way (tests/cuda/model_cuda_test.cpp). step_logits (optional, for tests): the
  // logits of every fed token from the prompt's last on, (fed, V) appended.
  // MINIGPT_MEGA_GENERATE=0 in the environment (read per call) forces the host loop.
  struct Generated : Generation {
    bool on_device = false;  // the device loop ran
  };
  Generated generate(std::span<const int32_t> prompt, int n, const SamplingParams& params, uint64_t seed,
                     int32_t eos, std::vector<float>* step_logits = nullptr);
  // Whether generate() runs the device loop for params: the megakernel's decode step of the
  // shipped architecture, and greedy or top-k in [1, 64] (top-k 0 or past 64: the host loop).
  bool device_loop(const SamplingParams& params) const;

  // For benchmarks: the step's graph, on stream(), with the token and position of the last
  // step() (no host work, no wait; the logits are not returned).
  void replay();
  CudaGPTOptions::Path path() const;  // Mega where the megakernel takes the decode step
  int mega_cluster() const;           // its cluster size (0: not Mega)
  bool mega_head_proj() const;        // Mega with proj by heads
  cudaStream_t stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minigpt
