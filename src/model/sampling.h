// Next-token sampling from logits: temperature and top-k, deterministic for a seed.
//
// The random stream is std::mt19937_64 (its output sequence is fixed by the C++ standard) and
// the uniform draw is built from its bits here, not by std::uniform_real_distribution (whose
// algorithm differs between standard libraries), so a seed gives the same tokens everywhere.
// What it does not do: top-p, repetition penalties, beam search.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace minigpt {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax); otherwise > 0, logits / temperature
  int top_k = 0;             // keep the k most likely tokens; 0 (or >= V) keeps all
  // Throws Error naming the bad field (negative or non-finite temperature, negative top_k).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}

  // Draws a token id from softmax(logits / temperature) restricted to the top_k logits.
  // Ties in the top-k cut and in greedy mode go to the lower id. Error on empty logits or a
  // NaN logit.
  int32_t sample(std::span<const float> logits, const SamplingParams& params);

 private:
  double uniform();  // [0, 1) with 53 random bits
  std::mt19937_64 rng_;
};

}  // namespace minigpt
