// The fused CUDA softmax's autotune cache on the CPU (no GPU needed): key building, staleness,
// corrupt files, the atomic merge of concurrent writers, the config JSON round trip.
#include "core/error.h"
#include "kernels/cuda/autotune_cache.h"
#include "minigpt/build_info.h"
#include "expect_error.h"


#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace minigpt::cuda;

namespace {

class AutotuneCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("minigpt_autotune_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "sub" / "autotune.json").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static AutotuneKey key(const std::string& bucket = "V600_B4096") {
    AutotuneKey k;
    k.gpu_name = "NVIDIA H200";
    k.cc_major = 9;
    k.cc_minor = 0;
    k.cuda_runtime = 13000;
    k.cuda_driver = 13000;
    k.source_sha256 = "aaaa";
    k.bucket = bucket;
    return k;
  }
  static FusedConfig rows_config() {
    FusedConfig c;
    c.variant = FusedVariant::Rows;
    c.threads_per_row = 32;
    c.rows_per_block = 4;
    c.nv = 5;
    c.vec = 4;
    c.streaming = true;
    return c;
  }
  std::string read_file() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write_file(const std::string& text) const {
    fs::create_directories(fs::path(path_).parent_path());
    std::ofstream(path_) << text;
  }

  fs::path dir_;
  std::string path_;
};

TEST(AutotuneKeyTest, BucketRoundsRowsUpToAPowerOfTwo) {
  EXPECT_EQ(shape_bucket(1, 600), "V600_B1");
  EXPECT_EQ(shape_bucket(64, 600), "V600_B64");
  EXPECT_EQ(shape_bucket(65, 600), "V600_B128");
  EXPECT_EQ(shape_bucket(262144, 600), "V600_B262144");
  EXPECT_EQ(shape_bucket(2048, 50257), "V50257_B2048");
}

TEST(AutotuneKeyTest, KeyNamesEveryField) {
  AutotuneKey k;
  k.gpu_name = "NVIDIA H200";
  k.cc_major = 9;
  k.cc_minor = 0;
  k.cuda_runtime = 13000;
  k.cuda_driver = 13010;
  k.source_sha256 = "deadbeef";
  k.bucket = "V600_B64";
  EXPECT_EQ(k.str(), "NVIDIA H200|sm_90|rt13000|drv13010|deadbeef|V600_B64");
  AutotuneKey other = k;
  other.cuda_driver = 13000;
  EXPECT_NE(k.str(), other.str());
}

TEST(FusedConfigTest, JsonRoundTripAndNames) {
  FusedConfig c;
  c.variant = FusedVariant::Block;
  c.threads_per_row = 512;
  c.cluster = 4;
  c.nv = 8;
  c.vec = 1;
  c.streaming = false;
  EXPECT_EQ(fused_config_from_json(to_json(c)), c);
  EXPECT_EQ(c.name(), "block(threads=512,cluster=4,nv=8,vec1,ca)");
  FusedConfig r;
  r.variant = FusedVariant::Rows;
  r.threads_per_row = 32;
  r.rows_per_block = 2;
  r.nv = 5;
  r.two_round = true;
  EXPECT_EQ(fused_config_from_json(to_json(r)), r);
  EXPECT_EQ(r.name(), "rows(tpr=32,rpb=2,nv=5,vec4,ca,2r)");
  nlohmann::json old_entry = to_json(r);  // entries written before two_round existed
  old_entry.erase("two_round");
  EXPECT_FALSE(fused_config_from_json(old_entry).two_round);
  c.two_round = true;  // only the Rows variant has a reduction choice
  EXPECT_FALSE(c.fits(1000, 48 * 1024));
  EXPECT_ERROR(fused_config_from_json(nlohmann::json{{"variant", "warp"}}), "unknown fused softmax variant 'warp'");
  EXPECT_ERROR(fused_config_from_json(nlohmann::json::array()), "fused config must be a JSON object, got []");
}

TEST(FusedConfigTest, FitsFollowsTheCapacityRules) {
  FusedConfig c;
  c.variant = FusedVariant::Rows;
  c.threads_per_row = 32;
  c.rows_per_block = 4;
  c.nv = 5;
  EXPECT_TRUE(c.fits(600, 48 * 1024));   // 32 lanes x 20 floats = 640 slots
  EXPECT_FALSE(c.fits(641, 48 * 1024));
  c.threads_per_row = 4;                 // 16-byte rows need 8 lanes for head and tail
  c.vec = 4;
  EXPECT_FALSE(c.fits(16, 48 * 1024));
  c.vec = 1;
  EXPECT_TRUE(c.fits(16, 48 * 1024));
  c.nv = 7;                              // not compiled
  EXPECT_FALSE(c.fits(16, 48 * 1024));
  FusedConfig s;
  s.variant = FusedVariant::Smem;
  s.threads_per_row = 1024;
  EXPECT_TRUE(s.fits(50257, 227 * 1024));
  EXPECT_FALSE(s.fits(60000, 227 * 1024));
}

TEST_F(AutotuneCacheTest, MissingFileIsEmptyAndSaveCreatesFolders) {
  AutotuneCache cache = AutotuneCache::load(path_);
  EXPECT_FALSE(cache.was_corrupt());
  EXPECT_FALSE(cache.find(key()).has_value());
  cache.put(key(), AutotuneEntry{rows_config(), 1.5, "2026-11-29T00:00:00Z"});
  cache.save();
  ASSERT_TRUE(fs::exists(path_));
  const AutotuneCache again = AutotuneCache::load(path_);
  const auto hit = again.find(key());
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->config, rows_config());
  EXPECT_DOUBLE_EQ(hit->us, 1.5);
  // No temporary files left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path_).parent_path())) (void)e, ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(AutotuneCacheTest, StaleEntriesAreNeverUsed) {
  AutotuneCache cache = AutotuneCache::load(path_);
  cache.put(key(), AutotuneEntry{rows_config(), 1.0, ""});
  cache.save();
  const AutotuneCache loaded = AutotuneCache::load(path_);
  for (int field = 0; field < 6; ++field) {
    AutotuneKey k = key();
    switch (field) {
      case 0: k.source_sha256 = "bbbb"; break;   // kernel source changed
      case 1: k.cuda_runtime = 13010; break;     // runtime upgraded
      case 2: k.cuda_driver = 13020; break;      // driver upgraded
      case 3: k.gpu_name = "NVIDIA H100 80GB HBM3"; break;
      case 4: k.cc_minor = 1; break;
      case 5: k.bucket = "V600_B8192"; break;
    }
    EXPECT_FALSE(loaded.find(k).has_value()) << "field " << field;
  }
  EXPECT_TRUE(loaded.find(key()).has_value());
}

TEST_F(AutotuneCacheTest, EntryWhoseFieldsDisagreeWithItsNameIsIgnored) {
  // Hand-edited: the name matches, the stored hash does not.
  nlohmann::json e = key().fields();
  e["source_sha256"] = "edited";
  e["config"] = to_json(rows_config());
  write_file(nlohmann::json{{"format", "minigpt-autotune"}, {"version", 1},
                            {"entries", {{key().str(), e}}}}.dump());
  const AutotuneCache cache = AutotuneCache::load(path_);
  EXPECT_FALSE(cache.was_corrupt());
  EXPECT_FALSE(cache.find(key()).has_value());
}

TEST_F(AutotuneCacheTest, PutDropsStaleEntriesOfTheSameGpuAndBucket) {
  AutotuneCache cache = AutotuneCache::load(path_);
  AutotuneKey old_key = key();
  old_key.source_sha256 = "old";
  cache.put(old_key, AutotuneEntry{rows_config(), 2.0, ""});
  cache.put(key("V32000_B4096"), AutotuneEntry{rows_config(), 3.0, ""});
  cache.save();
  AutotuneCache fresh = AutotuneCache::load(path_);
  fresh.put(key(), AutotuneEntry{rows_config(), 1.0, ""});
  fresh.save();
  const AutotuneCache after = AutotuneCache::load(path_);
  EXPECT_EQ(after.size(), 2u);  // the new entry and the other bucket; the stale one is gone
  EXPECT_FALSE(after.find(old_key).has_value());
  EXPECT_TRUE(after.find(key("V32000_B4096")).has_value());
}

TEST_F(AutotuneCacheTest, CorruptFileIsIgnoredWithAWarningAndRewritten) {
  for (const std::string& junk : {std::string("{\"format\": \"minigpt-autotune\", \"entr"),
                                  std::string("[1, 2, 3]"), std::string("\x00\xff garbage", 10),
                                  std::string("{\"format\": \"minigpt-autotune\", \"version\": 99, "
                                              "\"entries\": {}}")}) {
    write_file(junk);
    ::testing::internal::CaptureStderr();
    AutotuneCache cache = AutotuneCache::load(path_);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(cache.was_corrupt());
    EXPECT_NE(err.find("warning"), std::string::npos) << err;
    EXPECT_NE(err.find(path_), std::string::npos) << err;
    EXPECT_FALSE(cache.find(key()).has_value());
    cache.put(key(), AutotuneEntry{rows_config(), 1.0, ""});
    cache.save();
    const nlohmann::json j = nlohmann::json::parse(read_file());  // valid again
    EXPECT_EQ(j["format"], "minigpt-autotune");
    EXPECT_TRUE(AutotuneCache::load(path_).find(key()).has_value());
    EXPECT_FALSE(AutotuneCache::load(path_).was_corrupt());
  }
}

TEST_F(AutotuneCacheTest, ConcurrentWritersLeaveAValidFile) {
  // Several writers (threads standing in for processes) each load, put their own bucket and
  // save, many times over; a reader checks the file parses every time it looks.
  constexpr int kWriters = 4, kRounds = 25;
  std::atomic<bool> stop{false};
  std::atomic<int> bad_reads{0}, reads{0};
  std::thread reader([&] {
    while (!stop) {
      std::ifstream in(path_);
      if (!in) continue;
      std::stringstream s;
      s << in.rdbuf();
      ++reads;
      if (nlohmann::json::parse(s.str(), nullptr, false).is_discarded()) ++bad_reads;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int r = 0; r < kRounds; ++r) {
        AutotuneCache cache = AutotuneCache::load(path_);
        cache.put(key("V" + std::to_string(600 + w) + "_B64"),
                  AutotuneEntry{rows_config(), static_cast<double>(r), ""});
        cache.save();
      }
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad_reads.load(), 0) << "of " << reads.load() << " reads";
  const AutotuneCache final_cache = AutotuneCache::load(path_);
  EXPECT_FALSE(final_cache.was_corrupt());
  // Saves merge what is on disk (without a lock, a concurrent save may still lose a bucket
  // another wrote between its read and its rename; the next save of that writer restores it).
  // One more round, writer after writer: every writer's bucket must be there, with its last value.
  for (int w = 0; w < kWriters; ++w) {
    AutotuneCache cache = AutotuneCache::load(path_);
    cache.put(key("V" + std::to_string(600 + w) + "_B64"), AutotuneEntry{rows_config(), 1000.0 + w, ""});
    cache.save();
  }
  const AutotuneCache merged = AutotuneCache::load(path_);
  EXPECT_EQ(merged.size(), static_cast<size_t>(kWriters));
  for (int w = 0; w < kWriters; ++w) {
    const auto entry = merged.find(key("V" + std::to_string(600 + w) + "_B64"));
    ASSERT_TRUE(entry.has_value()) << "writer " << w << "'s bucket was dropped";
    EXPECT_EQ(entry->us, 1000.0 + w);
  }
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path_).parent_path()))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++leftovers;
  EXPECT_EQ(leftovers, 0);
}

TEST(AutotuneCachePathTest, FollowsXdgThenHome) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_xdg ? old_xdg : "", saved_home = old_home ? old_home : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(default_autotune_cache_path(), "/tmp/xdg-test/minigpt/autotune.json");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(default_autotune_cache_path(), "/home/someone/.cache/minigpt/autotune.json");
  if (old_xdg) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  if (old_home) setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
