// For the compiled-model tests (compile_model_test.cpp on the CPU, cuda/compile_cuda_test.cpp on
// the GPU): the largest absolute difference (NaN counts as a failure), random weights with
// non-trivial biases and LayerNorm gains (init_random zeroes the biases), and every grammar
// probe padded into one batch.
#pragma once

#include "data/probes.h"
#include "data/tokenizer.h"
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace minigpt::testcompile {

inline float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as a failure
  }
  return m;
}

inline ModelWeights random_weights(const ModelConfig& c, uint64_t seed) {
  ModelWeights w = ModelWeights::init_random(c, seed);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (auto& [name, t] : w.named())
    if (t->dim() == 1)
      for (float& v : t->span()) v += nd(rng);
  return w;
}

// Every probe of `path` as one (B, T) batch of ids, each prompt padded to the longest (causal:
// positions past a prompt's end do not change its last position's logits).
struct ProbeBatch {
  std::vector<data::Probe> probes;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> ids;  // (B, T)
  int64_t B = 0, T = 1;
};
inline ProbeBatch probe_batch(const std::string& path, const Tokenizer& tok) {
  ProbeBatch pb;
  pb.probes = data::load_probes(path);
  for (const data::Probe& p : pb.probes) {
    pb.prompts.push_back(data::probe_input_ids(p, tok));
    pb.T = std::max<int64_t>(pb.T, static_cast<int64_t>(pb.prompts.back().size()));
  }
  pb.B = static_cast<int64_t>(pb.prompts.size());
  pb.ids.assign(static_cast<size_t>(pb.B * pb.T), Tokenizer::kPad);
  for (int64_t b = 0; b < pb.B; ++b)
    std::copy(pb.prompts[static_cast<size_t>(b)].begin(), pb.prompts[static_cast<size_t>(b)].end(), pb.ids.begin() + b * pb.T);
  return pb;
}

}  // namespace minigpt::testcompile
