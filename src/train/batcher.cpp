#include "train/batcher.h"

#include "core/error.h"

#include <algorithm>

namespace minigpt {

uint64_t stream_fingerprint(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const int32_t id : tokens) {
    const auto u = static_cast<uint32_t>(id);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (u >> (8 * byte)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

BatchSampler::BatchSampler(TokenStream stream, int64_t B, int64_t T, uint64_t seed)
    : stream_(std::move(stream)), B_(B), T_(T), rng_{seed} {
  MINIGPT_CHECK(stream_ != nullptr, "batch sampler: no token stream");
  MINIGPT_CHECK(B >= 1 && T >= 1, "batch sampler: batch and sequence length must be >= 1, got {} and {}", B, T);
  MINIGPT_CHECK(static_cast<int64_t>(stream_->size()) >= T + 1,
                "batch sampler: the corpus holds {} tokens, fewer than one window of {}",
                stream_->size(), T + 1);
}

void BatchSampler::next(int32_t* ids, int32_t* targets) {
  const std::vector<int32_t>& s = *stream_;
  const auto starts = static_cast<uint64_t>(static_cast<int64_t>(s.size()) - T_);  // offsets [0, size - T - 1]
  for (int64_t b = 0; b < B_; ++b) {
    const auto off = static_cast<int64_t>(rng_.below(starts));
    std::copy_n(s.data() + off, T_, ids + b * T_);
    std::copy_n(s.data() + off + 1, T_, targets + b * T_);
    ++windows_;
  }
}

void BatchSampler::restore(uint64_t rng_state, uint64_t windows_drawn) {
  rng_.state = rng_state;
  windows_ = windows_drawn;
}

int64_t eval_batch_count(const std::vector<int32_t>& stream, int64_t B, int64_t T) {
  MINIGPT_CHECK(B >= 1 && T >= 1, "eval batches: B and T must be >= 1");
  const int64_t windows = (static_cast<int64_t>(stream.size()) - 1) / T;  // window w needs w*T + T + 1 tokens
  return std::max<int64_t>(windows, 0) / B;
}

void eval_batch(const std::vector<int32_t>& stream, int64_t B, int64_t T, int64_t i,
                int32_t* ids, int32_t* targets) {
  MINIGPT_CHECK(i >= 0 && i < eval_batch_count(stream, B, T),
                "eval batch {} out of range ({} available)", i, eval_batch_count(stream, B, T));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t off = (i * B + b) * T;
    std::copy_n(stream.data() + off, T, ids + b * T);
    std::copy_n(stream.data() + off + 1, T, targets + b * T);
  }
}

}  // namespace minigpt
