// For the compiled-model tests (compile_model_test.cpp on the CPU, cuda/compile_cuda_test.cpp on
// the GPU): the largest absolute difference (NaN counts as a failure) and random weights with
// non-trivial biases and LayerNorm gains (init_random zeroes the biases).
#pragma once

#include "model/gpt.h"

#include <cmath>
#include <cstdint>
#include <random>

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

}  // namespace minigpt::testcompile
