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
#include <vector>

namespace minigpt {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax); otherwise > 0, logits / temperature
  int top_k = 0;             // keep the k most likely tokens; 0 (or >= V) keeps all
  // Throws Error naming the bad field (negative or non-finite temperature, negative top_k).
  void validate() const;
  // How many of V tokens top_k keeps (all V for 0 or k >= V).
  int64_t candidates(int64_t V) const { return (top_k == 0 || top_k >= V) ? V : top_k; }
};

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}

  // Draws a token id from softmax(logits / temperature) restricted to the top_k logits.
  // Ties in the top-k cut and in greedy mode go to the lower id. Error on empty logits or a
  // NaN logit.
  int32_t sample(std::span<const float> logits, const SamplingParams& params);

  // The next draw of the stream: [0, 1) with 53 random bits. sample() takes one per sampled
  // token (none when temperature is 0); the GPU's decode loop replays the same stream with it.
  double uniform();

 private:
  std::mt19937_64 rng_;
};

// What a generation produced and why it stopped (after n tokens, at <eos>, at a full context).
struct Generation {
  enum class Stop { Count, Eos, ContextFull };
  std::vector<int32_t> tokens;
  Stop stop = Stop::Count;
};

// The sampling loop of `minigpt generate`, whatever runs the model: from `logits` (after the
// prompt), draws up to n tokens with one Sampler(seed). <eos> stops before it is kept; a kept
// token that finds the context full (full()) stops before it is fed; otherwise logits =
// step(id), a span valid until the next step.
template <class Step, class Full>
Generation sample_loop(std::span<const float> logits, Step&& step, Full&& full, const SamplingParams& params,
                       uint64_t seed, int n, int32_t eos) {
  Generation out;
  Sampler sampler(seed);
  for (int i = 0; i < n; ++i) {
    const int32_t id = sampler.sample(logits, params);
    if (id == eos) {
      out.stop = Generation::Stop::Eos;
      break;
    }
    out.tokens.push_back(id);
    if (full()) {
      out.stop = Generation::Stop::ContextFull;
      break;
    }
    logits = step(id);
  }
  return out;
}

}  // namespace minigpt
