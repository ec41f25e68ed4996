// Rng: the training loop's random numbers (which corpus windows form a batch).
//
// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit word of state, so a checkpoint stores the
// generator exactly and a resumed run draws the same numbers as an uninterrupted one. Not for
// weight initialisation (ModelWeights::init_random owns that) and not cryptographic.
#pragma once

#include <cstdint>

namespace minigpt {

struct Rng {
  uint64_t state = 0;

  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // An integer in [0, n), n >= 1: the high word of a 64x64 product (Lemire). The bias is
  // below n / 2^64, far beneath anything a corpus of millions of tokens can show.
  uint64_t below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;  // GCC/Clang extension; silences -Wpedantic
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
};

}  // namespace minigpt
