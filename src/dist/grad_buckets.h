// GradBuckets: DDP's gradient all-reduce, in buckets overlapped with the backward pass.
//
// One bucket per group of gradients that GrammarMiniGPT::backward finalises together, in the
// backward's order (the reverse of the forward): [ln_f.*, lm_head.*], block L-1, ..., block 0,
// [wte, wpe] (the groups are dist/grad_layout.h's, shared with the GPU reducer). When backward reports a group final (its on_ready hook), the bucket's tensors
// are copied into one contiguous fp32 buffer and its all-reduce starts at once; the pending
// ones are poked (test()) at every later group so the engine progresses while the backward
// computes. finish() waits for the rest, then writes sum / world_size back into the
// gradients: the mean of the ranks' mean gradients, which is the gradient of the whole batch
// (equal-size shards) up to summation order.
//
// Bytes per step = 4 * parameter_count (every fp32 gradient once) - the payload an all-reduce
// moves; the planner (cli parallel-plan) derives the wire bytes from it.
#pragma once

#include "dist/communicator.h"
#include "model/config.h"
#include "model/weights.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace minigpt::dist {

struct ReduceStats {
  int64_t bytes = 0;          // all-reduce payload of the last step (fp32 gradients)
  int buckets = 0;
  double exposed_s = 0.0;     // time finish() waited after the backward (not hidden)
};

class GradBuckets {
 public:
  // grads must outlive this object and keep its storage (the trainer's gradient buffers).
  GradBuckets(const ModelConfig& config, ModelWeights& grads, Communicator& comm);

  // backward's on_ready: stage = GrammarMiniGPT::kHeadStage, a block index, or kEmbeddingStage.
  void on_ready(int stage);
  // Waits for every bucket and stores the averaged gradients. Every bucket must be started.
  void finish();
  const ReduceStats& stats() const { return stats_; }
  std::vector<size_t> bucket_floats() const;  // each bucket's size, in backward order

 private:
  struct Bucket {
    std::vector<Tensor*> tensors;
    std::vector<float> buffer;
    std::unique_ptr<PendingReduce> pending;
  };
  Bucket& bucket_for(int stage);

  int n_layer_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;  // backward order: head, block L-1 .. 0, embeddings
  ReduceStats stats_;
};

}  // namespace minigpt::dist
