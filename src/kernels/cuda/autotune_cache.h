// The autotune cache of the fused CUDA softmax: a JSON file (default
// $XDG_CACHE_HOME/minigpt/autotune.json, else ~/.cache/minigpt/autotune.json) mapping a key to
// the FusedConfig that won the sweep. The key names the GPU (name, compute capability), the
// CUDA runtime and driver versions, the SHA256 of the fused kernel's sources and the shape
// bucket; an entry is used only when every one of those matches (a stale entry never is).
// Plain C++, no GPU: the autotuner (autotune.h) fills it and tests/autotune_cache_test.cpp
// checks it on the CPU.
//
// Writes go to a temporary file in the same folder, then rename() over the cache, merged with
// what is on disk at that moment: two processes tuning at once leave a valid file (the later
// writer's entries win where both wrote the same key). A corrupt file is ignored with a
// warning on stderr and rewritten on the next save.
#pragma once

#include "kernels/cuda/fused_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace minigpt::cuda {

nlohmann::json to_json(const FusedConfig& c);
FusedConfig fused_config_from_json(const nlohmann::json& j);  // throws Error on a malformed entry

// Rows are bucketed by the next power of two (tuning depends on rows only through the
// number of waves); cols exactly (the held-slot count depends on it). "V600_B4096".
std::string shape_bucket(int64_t rows, int64_t cols);

struct AutotuneKey {
  std::string gpu_name;       // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int cuda_runtime = 0;       // cudaRuntimeGetVersion, e.g. 13000
  int cuda_driver = 0;        // cudaDriverGetVersion
  std::string source_sha256;  // kFusedSourceSha256 (generated at configure time)
  std::string bucket;         // shape_bucket()
  std::string str() const;    // the entry's name in the file
  nlohmann::json fields() const;
};

struct AutotuneEntry {
  FusedConfig config;
  double us = 0;          // median time of the winner in the sweep
  std::string tuned_at;   // UTC ISO-8601
};

class AutotuneCache {
 public:
  // Reads `path`; a missing file is an empty cache, a corrupt one too (with a warning).
  static AutotuneCache load(const std::string& path);

  // The entry for `key` if present and every stored key field equals the key's; else nullopt.
  std::optional<AutotuneEntry> find(const AutotuneKey& key) const;
  // Adds or replaces the entry, dropping entries of the same GPU and bucket that are stale
  // (other source hash, runtime or driver).
  void put(const AutotuneKey& key, const AutotuneEntry& entry);
  // Merges with the file on disk now and writes it atomically (temporary file + rename).
  void save() const;

  const std::string& path() const { return path_; }
  bool was_corrupt() const { return corrupt_; }
  size_t size() const { return entries_.size(); }

 private:
  std::string path_;
  nlohmann::json entries_ = nlohmann::json::object();  // key string -> entry
  nlohmann::json dropped_ = nlohmann::json::array();   // stale keys put() removed
  bool corrupt_ = false;
};

// $XDG_CACHE_HOME/minigpt/autotune.json, else $HOME/.cache/minigpt/autotune.json, else
// ./.minigpt-autotune.json when neither variable is set.
std::string default_autotune_cache_path();

// Current UTC time, ISO-8601 ("2026-11-29T18:00:00Z").
std::string utc_now_iso8601();

}  // namespace minigpt::cuda
