// TrainOptions: the whole recipe of a training run. Its defaults are the shipped model's
// recipe (`minigpt train --seed 42`); a checkpoint stores it so a resumed run follows the same
// schedule and data.
//
// Seeds derived from `seed` (all distinct streams):
//   weights       ModelWeights::init_random(model, seed)
//   train corpus  data::corpus_token_stream(seed, corpus_tokens)
//   val corpus    data::corpus_token_stream(seed + 1, val_tokens)   (held out)
//   batches       BatchSampler Rng seeded with seed ^ kSamplerSalt
#pragma once

#include "model/config.h"
#include "train/adamw.h"
#include "train/lr_schedule.h"

#include <nlohmann/json.hpp>

#include <cstdint>

namespace minigpt {

struct TrainOptions {
  uint64_t seed = 42;
  int64_t steps = 3000;
  int64_t batch = 64;
  int64_t seq = 32;
  float lr = 3e-3f;
  float min_lr = 2e-4f;
  int64_t warmup = 200;
  float grad_clip = 1.0f;   // global-norm clip; 0 disables
  AdamWConfig adamw;
  int64_t corpus_tokens = 4'000'000;  // whole sentences until at least this many ids
  int64_t val_tokens = 40'000;
  int64_t eval_batches = 16;  // batches of (batch, seq) per held-out evaluation (fewer if the val corpus is short)
  ModelConfig model;          // vocab_size is filled from the tokenizer

  static constexpr uint64_t kSamplerSalt = 0xD1B54A32D192ED03ull;
  uint64_t val_seed() const { return seed + 1; }
  uint64_t sampler_seed() const { return seed ^ kSamplerSalt; }

  LrSchedule schedule() const { return {lr, min_lr, warmup, steps}; }
  void validate() const;  // Error naming the bad option

  nlohmann::json to_json() const;
  static TrainOptions from_json(const nlohmann::json& j);  // every key required
};

}  // namespace minigpt
