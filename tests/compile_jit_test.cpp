// The JIT cache (compile/jit.h): misses and hits, what the key depends on, corrupt, truncated
// and stale entries rebuilt (never loaded), several processes compiling one source at once,
// compiler errors with their diagnostics, and MINIGPT_CACHE_DIR.
#include "compile/jit.h"

#include "compile_jit_test_util.h"
#include "core/isa.h"
#include "core/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using namespace minigpt;
using namespace minigpt::compile;

namespace {

// A fresh cache folder per test, removed afterwards.
class JitTest : public ::testing::Test {
 protected:

  JitRequest request(const std::string& source) const {
    JitRequest r;
    r.source = source;
    r.key_extra = "jit_test v1";
    r.name = "jit_test";
    r.cache_dir = dir_;
    return r;
  }

  testjit::TempCacheDir tmp_;
  const fs::path& dir_ = tmp_.path();
};

const char* kAnswer = R"(extern "C" int answer(int x) { return 40 + x; })";

int call_answer(const JitLibrary& lib, int x) {
  return reinterpret_cast<int (*)(int)>(lib.symbol("answer"))(x);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// Only the cache's entry files (no temporaries left behind).
std::vector<std::string> entry_files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(dir)) names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST(JitHostCompiler, FoundAndDescribed) {
  const HostCompiler& hc = host_compiler();
  EXPECT_TRUE(fs::path(hc.path).is_absolute()) << hc.path;
  EXPECT_FALSE(hc.version.empty());
  // contraction as eager's kernels of the active ISA: FMAs on avx512, none in the fallbacks
  const char* contract = active_isa() == Isa::Avx512 ? "-ffp-contract=fast" : "-ffp-contract=off";
  EXPECT_NE(std::find(hc.flags.begin(), hc.flags.end(), contract), hc.flags.end());
  EXPECT_EQ(std::count_if(hc.flags.begin(), hc.flags.end(), [](const std::string& f) { return f.starts_with("-ffp-contract="); }), 1);
  EXPECT_NE(hc.describe().find(hc.version), std::string::npos);
  EXPECT_FALSE(cpu_features().empty());
}

TEST(JitSha256, KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(JitTest, MissThenHit) {
  const JitRequest r = request(kAnswer);
  const auto first = jit_load(r);
  EXPECT_FALSE(first->cache_hit());
  EXPECT_GT(first->compile_seconds(), 0.0);
  EXPECT_GT(first->compile_cpu_seconds(), 0.0);
  EXPECT_EQ(call_answer(*first, 2), 42);
  EXPECT_EQ(first->key(), jit_key(r));
  EXPECT_EQ(first->path(), dir_ / (first->key() + ".so"));

  const std::string k = first->key();
  EXPECT_EQ(entry_files(dir_),
            (std::vector<std::string>{k + ".cpp", k + ".json", k + ".lock", k + ".so"}));
  EXPECT_EQ(read_text(dir_ / (k + ".cpp")), kAnswer);
  const auto j = nlohmann::json::parse(read_text(dir_ / (k + ".json")));
  EXPECT_EQ(j.at("key"), k);
  EXPECT_EQ(j.at("so_sha256"), first->so_sha256());
  EXPECT_EQ(j.at("compiler").at("path"), host_compiler().path);
  EXPECT_EQ(j.at("cpu_features"), cpu_features());
  EXPECT_GT(j.at("compile_cpu_seconds").get<double>(), 0.0);

  const auto second = jit_load(r);
  EXPECT_TRUE(second->cache_hit());
  EXPECT_EQ(second->compile_seconds(), 0.0);
  EXPECT_EQ(second->so_sha256(), first->so_sha256());
  EXPECT_EQ(call_answer(*second, 1), 41);
  EXPECT_EQ(call_answer(*first, 0), 40);  // both loaded at once, independently
}

TEST_F(JitTest, KeyDependsOnSourceExtraAndFlagsOnly) {
  const JitRequest base = request(kAnswer);
  const std::string k = jit_key(base);
  EXPECT_EQ(k.size(), 64u);

  JitRequest r = base;
  r.source += "\n";
  EXPECT_NE(jit_key(r), k) << "source";
  r = base;
  r.key_extra = "jit_test v2";
  EXPECT_NE(jit_key(r), k) << "key_extra";
  r = base;
  r.extra_flags = {"-DUNROLL=4"};
  EXPECT_NE(jit_key(r), k) << "flags";
  JitRequest r2 = base;
  r2.extra_flags = {"-DUNROLL=8"};
  EXPECT_NE(jit_key(r2), jit_key(r)) << "flag values";
  // Moving text between fields must not collide (the fields are length-prefixed).
  JitRequest a = base, b = base;
  a.source = "ab";
  a.key_extra = "c";
  b.source = "a";
  b.key_extra = "bc";
  EXPECT_NE(jit_key(a), jit_key(b));

  r = base;
  r.name = "another name";
  r.cache_dir = "/elsewhere";
  EXPECT_EQ(jit_key(r), k) << "the name and the folder are not part of the code";
}

TEST_F(JitTest, ExtraFlagsReachTheCompiler) {
  JitRequest r = request(R"(extern "C" int answer(int x) { return MG_BASE + x; })");
  r.extra_flags = {"-DMG_BASE=100"};
  EXPECT_EQ(call_answer(*jit_load(r), 1), 101);
  r.extra_flags = {"-DMG_BASE=200"};
  const auto lib = jit_load(r);
  EXPECT_FALSE(lib->cache_hit());
  EXPECT_EQ(call_answer(*lib, 1), 201);
}

TEST_F(JitTest, CorruptSoIsRebuiltNotLoaded) {
  const JitRequest r = request(kAnswer);
  const std::string good = jit_load(r)->so_sha256();
  const fs::path so = dir_ / (jit_key(r) + ".so");
  // Flip one byte in the middle, in place: same size, wrong checksum.
  std::string bytes = read_text(so);
  bytes[bytes.size() / 2] ^= 0x5a;
  write_text(so, bytes);

  const auto lib = jit_load(r);
  EXPECT_FALSE(lib->cache_hit());
  EXPECT_EQ(lib->so_sha256(), good);  // the same bytes again (-frandom-seed, fixed names)
  EXPECT_EQ(call_answer(*lib, 2), 42);
  EXPECT_TRUE(jit_load(r)->cache_hit());  // and the entry is whole again
}

TEST_F(JitTest, TruncatedSoIsRebuiltNotLoaded) {
  const JitRequest r = request(kAnswer);
  jit_load(r);
  const fs::path so = dir_ / (jit_key(r) + ".so");
  fs::resize_file(so, fs::file_size(so) / 3);
  const auto lib = jit_load(r);
  EXPECT_FALSE(lib->cache_hit());
  EXPECT_EQ(call_answer(*lib, 2), 42);
  fs::resize_file(so, 0);
  EXPECT_FALSE(jit_load(r)->cache_hit());
  fs::remove(so);
  EXPECT_FALSE(jit_load(r)->cache_hit());
  EXPECT_TRUE(jit_load(r)->cache_hit());
}

TEST_F(JitTest, StaleOrMismatchedJsonIsRebuilt) {
  const JitRequest r = request(kAnswer);
  jit_load(r);
  const fs::path json = dir_ / (jit_key(r) + ".json");
  const std::string original = read_text(json);

  // Each edit makes the entry unusable; each load rebuilds it and then it hits again.
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> edits = {
      {"another key", [](nlohmann::json& j) { j["key"] = std::string(64, '0'); }},
      {"another checksum", [](nlohmann::json& j) { j["so_sha256"] = std::string(64, 'f'); }},
      {"another size", [](nlohmann::json& j) { j["so_bytes"] = 1; }},
      {"another compiler", [](nlohmann::json& j) { j["compiler"]["version"] = "gcc 1.0"; }},
      {"older format", [](nlohmann::json& j) { j["format"] = 0; }},
  };
  for (const auto& [what, edit] : edits) {
    auto j = nlohmann::json::parse(read_text(json));
    edit(j);
    write_text(json, j.dump());
    const auto lib = jit_load(r);
    EXPECT_FALSE(lib->cache_hit()) << what;
    EXPECT_EQ(call_answer(*lib, 2), 42) << what;
    EXPECT_TRUE(jit_load(r)->cache_hit()) << what;
  }
  for (const std::string& bad : {std::string("{not json"), original.substr(0, original.size() / 2),
                                std::string()}) {
    write_text(json, bad);
    EXPECT_FALSE(jit_load(r)->cache_hit()) << bad;
    EXPECT_TRUE(jit_load(r)->cache_hit()) << bad;
  }
  // A .json without its .so.
  fs::remove(dir_ / (jit_key(r) + ".so"));
  EXPECT_FALSE(jit_load(r)->cache_hit());
}

// Several processes (forked from this one, released together) compile one new source into one
// folder: every one succeeds, loads a library that works, and all report the same key and
// bytes; the entry left behind is valid and nothing temporary is left.
TEST_F(JitTest, ConcurrentProcessesAllSucceedAndAgree) {
  constexpr int kProcs = 4;
  const JitRequest r = request(R"(extern "C" int answer(int x) { return 40 + x; } // concurrent)");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) > 0) {
      }  // wait until the parent closes the pipe
      int code = 0;
      try {
        const auto lib = jit_load(r);
        std::ofstream(dir_ / ("result." + std::to_string(i)))
            << lib->key() << " " << lib->so_sha256() << " " << call_answer(*lib, 2) << " "
            << lib->cache_hit() << "\n";
      } catch (const std::exception& e) {
        std::ofstream(dir_ / ("result." + std::to_string(i))) << "error " << e.what() << "\n";
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // release every child at once
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::set<std::string> agreed;
  int compiled = 0;
  for (int i = 0; i < kProcs; ++i) {
    std::istringstream in(read_text(dir_ / ("result." + std::to_string(i))));
    std::string key, sha;
    int value = 0, hit = 0;
    in >> key >> sha >> value >> hit;
    EXPECT_EQ(key, jit_key(r)) << in.str();
    EXPECT_EQ(value, 42);
    agreed.insert(sha);
    compiled += hit ? 0 : 1;
    fs::remove(dir_ / ("result." + std::to_string(i)));
  }
  EXPECT_EQ(agreed.size(), 1u);
  EXPECT_EQ(compiled, 1) << "the others waited on the lock and loaded its entry";
  const auto lib = jit_load(r);
  EXPECT_TRUE(lib->cache_hit());
  EXPECT_EQ(lib->so_sha256(), *agreed.begin());
  const std::string k = lib->key();
  EXPECT_EQ(entry_files(dir_),
            (std::vector<std::string>{k + ".cpp", k + ".json", k + ".lock", k + ".so"}));
}

TEST_F(JitTest, CompileErrorCarriesDiagnostics) {
  const JitRequest r = request("extern \"C\" int answer(int x) { return x + no_such_name; }\n");
  try {
    jit_load(r);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("jit: compiling 'jit_test' failed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_name"), std::string::npos) << msg;  // the compiler's own words
    EXPECT_NE(msg.find("error"), std::string::npos) << msg;
  }
  // Nothing loadable was left: no .so, no .json (the source is kept for the reader).
  const std::string k = jit_key(r);
  EXPECT_FALSE(fs::exists(dir_ / (k + ".so")));
  EXPECT_FALSE(fs::exists(dir_ / (k + ".json")));
  EXPECT_TRUE(fs::exists(dir_ / (k + ".failed.cpp")));
}

TEST_F(JitTest, MissingSymbolIsAnError) {
  const auto lib = jit_load(request(kAnswer));
  try {
    lib->symbol("question");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'question'"), std::string::npos) << e.what();
  }
}

TEST_F(JitTest, CacheDirFromEnvironment) {
  const char* old = std::getenv("MINIGPT_CACHE_DIR");
  const std::string saved = old ? old : "";
  const fs::path env_dir = dir_ / "from_env";
  ::setenv("MINIGPT_CACHE_DIR", env_dir.c_str(), 1);
  EXPECT_EQ(default_cache_dir(), env_dir);
  JitRequest r = request(kAnswer);
  r.cache_dir.clear();  // use the default
  const auto lib = jit_load(r);
  EXPECT_EQ(lib->path(), env_dir / (lib->key() + ".so"));
  EXPECT_TRUE(fs::exists(env_dir / (lib->key() + ".json")));

  ::unsetenv("MINIGPT_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/some/xdg", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/some/xdg/minigpt/compile"));
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
  if (old) ::setenv("MINIGPT_CACHE_DIR", saved.c_str(), 1);
}

// A process killed mid-compile or mid-load leaves a build folder or a load copy behind: the next
// compile in the folder removes those older than an hour, and nothing recent.
TEST_F(JitTest, LeftoversOfDeadProcessesAreSwept) {
  const fs::path old_build = dir_ / ".build-0123456789abcdef-XXXXXX";
  const fs::path old_load = dir_ / ".0123456789abcdef.load.abcdef.so";
  const fs::path new_load = dir_ / ".fedcba9876543210.load.abcdef.so";
  fs::create_directory(old_build);
  write_text(old_build / "x.cpp", "int x;");
  write_text(old_load, "partial");
  write_text(new_load, "in use");
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(old_build, two_hours_ago);
  fs::last_write_time(old_load, two_hours_ago);
  jit_load(request(kAnswer));
  EXPECT_FALSE(fs::exists(old_build));
  EXPECT_FALSE(fs::exists(old_load));
  EXPECT_TRUE(fs::exists(new_load));
}
