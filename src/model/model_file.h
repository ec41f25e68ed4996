// Model files: a GrammarMiniGPT's config, vocabulary and weights in one file.
//
// .safetensors (main format): tensors named as ModelWeights::named(), fp32, and in
//   __metadata__: "format": "minigpt", "config": JSON of ModelConfig, "vocab": JSON array of
//   the tokens (index = token id).
// .npz (for the NumPy reference): the same tensors as .npy members plus "__metadata__.npy",
//   a 1-D uint8 array holding the UTF-8 JSON {"config": {...}, "vocab": [...]}.
//
// Loading trusts nothing (see io/safetensors.h and io/npz.h) and then checks every name and
// shape against the config: a missing, extra or misshapen tensor is an Error naming the file
// and the tensor. Saving is atomic (temporary file, fsync, rename).
#pragma once

#include "model/config.h"
#include "model/weights.h"

#include <string>
#include <vector>

namespace minigpt {

struct ModelFile {
  ModelConfig config;
  std::vector<std::string> vocab;  // size == config.vocab_size
  ModelWeights weights;
};

ModelFile load_model(const std::string& path);              // by extension: .safetensors | .npz
void save_model(const std::string& path, const ModelFile& model);

}  // namespace minigpt
