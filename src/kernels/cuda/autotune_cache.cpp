// The autotune cache file (see autotune_cache.h). Host code only; no CUDA calls here.
#include "kernels/cuda/autotune_cache.h"

#include "core/error.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <unistd.h>

namespace minigpt::cuda {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "minigpt-autotune";
constexpr int kVersion = 1;

// Parses the file: the entries object, or nullopt with `why` when it is not a valid cache.
std::optional<nlohmann::json> read_entries(const std::string& path, std::string& why, bool& exists) {
  std::ifstream in(path, std::ios::binary);
  exists = static_cast<bool>(in);
  if (!in) return nlohmann::json::object();
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    why = "not valid JSON";
    return std::nullopt;
  }
  if (!j.is_object() || j.value("format", "") != kFormat || !j.contains("entries") ||
      !j["entries"].is_object()) {
    why = "not a minigpt autotune cache";
    return std::nullopt;
  }
  if (j.value("version", 0) != kVersion) {
    why = fmt::format("version {} (expected {})", j.value("version", 0), kVersion);
    return std::nullopt;
  }
  return j["entries"];
}
}  // namespace

nlohmann::json to_json(const FusedConfig& c) {
  return {{"variant", variant_name(c.variant)}, {"threads_per_row", c.threads_per_row},
          {"rows_per_block", c.rows_per_block}, {"cluster", c.cluster},
          {"nv", c.nv},                         {"vec", c.vec},
          {"streaming", c.streaming},           {"two_round", c.two_round}};
}

FusedConfig fused_config_from_json(const nlohmann::json& j) {
  MINIGPT_CHECK(j.is_object(), "fused config must be a JSON object, got {}", j.dump());
  try {
    FusedConfig c;
    c.variant = parse_variant(j.at("variant").get<std::string>());
    c.threads_per_row = j.at("threads_per_row").get<int>();
    c.rows_per_block = j.at("rows_per_block").get<int>();
    c.cluster = j.at("cluster").get<int>();
    c.nv = j.at("nv").get<int>();
    c.vec = j.at("vec").get<int>();
    c.streaming = j.at("streaming").get<bool>();
    c.two_round = j.value("two_round", false);
    return c;
  } catch (const nlohmann::json::exception& e) {
    MINIGPT_FAIL("malformed fused config {}: {}", j.dump(), e.what());
  }
}

std::string shape_bucket(int64_t rows, int64_t cols) {
  int64_t b = 1;
  while (b < rows) b *= 2;
  return fmt::format("V{}_B{}", cols, b);
}

std::string AutotuneKey::str() const {
  return fmt::format("{}|sm_{}{}|rt{}|drv{}|{}|{}", gpu_name, cc_major, cc_minor, cuda_runtime,
                     cuda_driver, source_sha256, bucket);
}

nlohmann::json AutotuneKey::fields() const {
  return {{"gpu", gpu_name},          {"cc", fmt::format("{}.{}", cc_major, cc_minor)},
          {"cuda_runtime", cuda_runtime}, {"cuda_driver", cuda_driver},
          {"source_sha256", source_sha256}, {"bucket", bucket}};
}

AutotuneCache AutotuneCache::load(const std::string& path) {
  AutotuneCache cache;
  cache.path_ = path;
  std::string why;
  bool exists = false;
  std::optional<nlohmann::json> entries = read_entries(path, why, exists);
  if (!entries) {
    std::cerr << fmt::format("minigpt: warning: autotune cache {} is {}; ignoring it (it will be "
                             "rewritten)\n", path, why);
    cache.corrupt_ = true;
  } else {
    cache.entries_ = std::move(*entries);
  }
  return cache;
}

std::optional<AutotuneEntry> AutotuneCache::find(const AutotuneKey& key) const {
  const auto it = entries_.find(key.str());
  if (it == entries_.end() || !it->is_object()) return std::nullopt;
  const nlohmann::json& e = *it;
  // Every key field must match: the string key alone could be edited or collide.
  const nlohmann::json want = key.fields();
  for (const auto& [name, value] : want.items())
    if (!e.contains(name) || e[name] != value) return std::nullopt;
  try {
    AutotuneEntry out;
    out.config = fused_config_from_json(e.at("config"));
    out.us = e.value("us", 0.0);
    out.tuned_at = e.value("tuned_at", "");
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // a malformed entry is as good as none: it gets retuned
  }
}

void AutotuneCache::put(const AutotuneKey& key, const AutotuneEntry& entry) {
  // Drop stale entries of this GPU and bucket (other sources, runtime or driver).
  for (auto it = entries_.begin(); it != entries_.end();) {
    const nlohmann::json& e = *it;
    const bool same_slot = e.is_object() && e.value("gpu", "") == key.gpu_name &&
                           e.value("cc", "") == fmt::format("{}.{}", key.cc_major, key.cc_minor) &&
                           e.value("bucket", "") == key.bucket;
    if (same_slot && it.key() != key.str()) {
      dropped_.push_back(it.key());
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  nlohmann::json e = key.fields();
  e["config"] = to_json(entry.config);
  e["name"] = entry.config.name();
  e["us"] = entry.us;
  e["tuned_at"] = entry.tuned_at;
  entries_[key.str()] = std::move(e);
}

void AutotuneCache::save() const {
  MINIGPT_CHECK(!path_.empty(), "autotune cache has no path");
  const fs::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    MINIGPT_CHECK(!ec, "cannot create the autotune cache folder {}: {}",
                  target.parent_path().string(), ec.message());
  }
  // Merge: entries another process wrote since we loaded survive; ours win on equal keys.
  std::string why;
  bool exists = false;
  nlohmann::json merged = read_entries(path_, why, exists).value_or(nlohmann::json::object());
  for (const auto& k : dropped_) merged.erase(k.get<std::string>());
  for (const auto& [k, v] : entries_.items()) merged[k] = v;
  const nlohmann::json doc = {{"format", kFormat}, {"version", kVersion}, {"entries", merged}};

  std::random_device rd;
  const std::string tmp = fmt::format("{}.tmp.{}.{:08x}", path_, static_cast<long>(getpid()), rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MINIGPT_CHECK(static_cast<bool>(out), "cannot write the autotune cache temporary file {}", tmp);
    out << doc.dump(2) << '\n';
    out.flush();
    MINIGPT_CHECK(static_cast<bool>(out), "writing the autotune cache temporary file {} failed", tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    MINIGPT_FAIL("cannot rename {} to the autotune cache {}", tmp, path_);
  }
}

std::string default_autotune_cache_path() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "minigpt" / "autotune.json").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "minigpt" / "autotune.json").string();
  return ".minigpt-autotune.json";
}

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace minigpt::cuda
