// Inputs for the microbenchmarks: random floats from a seed, never zeros (design.md: never time
// on zeros).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace minigpt::bench {

// n floats uniform in [-1, 1) from `seed`.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace minigpt::bench
