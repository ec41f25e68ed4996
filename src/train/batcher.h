// Batches for next-token training, cut from a corpus token stream.
//
// The stream is the corpus as one sequence of token ids (each sentence <bos> words <eos>,
// sentences back to back). A training row is a window of T + 1 consecutive tokens starting at
// a uniformly random offset: ids = window[0, T), targets = window[1, T + 1). Random offsets put
// sentence starts at every position, so the model predicts well both after a <bos> and in the
// middle of a context of earlier sentences.
//
// The sampler's whole state is the Rng word and the count of windows drawn (the data
// position); a checkpoint stores both, and restore() continues the same sequence of batches.
// Evaluation batches are deterministic and stateless: eval_batch(i) is the i-th block of B
// non-overlapping windows from the start of the (held-out) stream.
#pragma once

#include "train/rng.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace minigpt {

using TokenStream = std::shared_ptr<const std::vector<int32_t>>;

// FNV-1a over the ids: a checkpoint records it so a resume on a different corpus is an Error.
uint64_t stream_fingerprint(std::span<const int32_t> tokens);

class BatchSampler {
 public:
  // Error unless B >= 1, T >= 1 and the stream holds at least T + 1 tokens.
  BatchSampler(TokenStream stream, int64_t B, int64_t T, uint64_t seed);

  int64_t batch() const { return B_; }
  int64_t seq() const { return T_; }

  // Fills ids and targets (B, T) row-major with the next batch and advances the state.
  void next(int32_t* ids, int32_t* targets);

  uint64_t rng_state() const { return rng_.state; }
  uint64_t windows_drawn() const { return windows_; }
  void restore(uint64_t rng_state, uint64_t windows_drawn);

 private:
  TokenStream stream_;
  int64_t B_, T_;
  Rng rng_;
  uint64_t windows_ = 0;
};

// How many evaluation batches of (B, T) the stream holds (non-overlapping windows).
int64_t eval_batch_count(const std::vector<int32_t>& stream, int64_t B, int64_t T);
// Batch i (0 <= i < eval_batch_count): windows i*B .. i*B + B - 1, window w at offset w*T.
void eval_batch(const std::vector<int32_t>& stream, int64_t B, int64_t T, int64_t i,
                int32_t* ids, int32_t* targets);

}  // namespace minigpt
