// Training checkpoints: everything a run needs to continue bit for bit, in one safetensors file.
//
// Tensors (fp32): the weights under their model names (wte.weight, ...), the AdamW moments
// under "adamw.m.<name>" and "adamw.v.<name>".
// __metadata__: "format": "minigpt-checkpoint", "config" (ModelConfig JSON), "vocab" (JSON
// array), "options" (TrainOptions JSON), "step" (updates done), "rng_state" and
// "windows_drawn" (the batch sampler: RNG word and data position, decimal strings),
// "train_fingerprint" (FNV-1a of the training token stream, so resuming on another corpus is
// an Error), "world_size" (ranks of a data-parallel run; optional, 1 when absent).
//
// Written atomically (io::write_safetensors: temporary file, fsync, rename, fsync of the
// folder), so a kill at any moment leaves the previous checkpoint intact and loadable.
// Reading validates the file (io/safetensors.h) and every name and shape against the config.
#pragma once

#include "model/config.h"
#include "model/weights.h"
#include "train/train_options.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt {

struct TrainCheckpoint {
  TrainOptions options;
  std::vector<std::string> vocab;
  ModelWeights weights;
  ModelWeights adam_m, adam_v;
  int64_t step = 0;
  uint64_t rng_state = 0;
  uint64_t windows_drawn = 0;
  uint64_t train_fingerprint = 0;
  int world_size = 1;  // ranks of the run that wrote it (data parallel); absent in old files: 1
};

void save_checkpoint(const std::string& path, const TrainCheckpoint& checkpoint);
TrainCheckpoint load_checkpoint(const std::string& path);

}  // namespace minigpt
