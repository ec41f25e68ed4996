// The JIT: generated C++ source -> shared library on disk -> loaded with dlopen, through an
// on-disk cache. What Inductor's codecache does for its generated C++, for minigpt's compiler.
//
// The cache folder is $MINIGPT_CACHE_DIR, else $XDG_CACHE_HOME/minigpt/compile, else
// $HOME/.cache/minigpt/compile (the autotune cache's rule). One entry per key:
//   <key>.so     the library             <key>.json  what built it, and the .so's SHA-256
//   <key>.cpp    the source it was built from (for people; never read back to build)
// The key is the SHA-256 of everything that changes the machine code: the source text, the
// caller's key_extra (code generator version, graph hash), the compiler's path, version and
// flags, and the CPU features the flags target. An entry is loaded only when its .json parses,
// names the same key, and the .so's checksum matches: a corrupt, truncated or stale entry is
// rebuilt, never loaded. Entries are written to temporaries and renamed into place, so several
// processes compiling the same source at once all succeed and load identical libraries.
//
// What it does not do: generate code (codegen_cpp.h) or decide what to call in the library
// (runner.h). Not for CUDA: the GPU back end compiles through NVRTC (a later jit_cuda.h).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace minigpt::compile {

// The system C++ compiler as the JIT runs it.
struct HostCompiler {
  std::string path;     // absolute; $MINIGPT_CXX, else $CXX, else c++ / g++ / clang++ on PATH
  std::string version;  // first line of `path --version`
  std::vector<std::string> flags;  // -O3 -march=native -fPIC -shared ... (recorded, hashed)
  std::string describe() const;    // "g++ (Debian 12.2.0-14) 12.2.0 -O3 -march=native ..."
};
const HostCompiler& host_compiler();  // found once; Error naming what is missing if none

std::filesystem::path default_cache_dir();

struct JitRequest {
  std::string source;       // one translation unit, self-contained (includes only the C/C++ std)
  std::string key_extra;    // what else the code depends on: codegen version, graph hash, mode
  std::string name;         // for logs: "gpt_B2_T16"
  std::filesystem::path cache_dir;  // empty: default_cache_dir()
};

// A loaded library; dlclose on destruction. Keep it alive while any symbol from it is in use.
class JitLibrary {
 public:
  ~JitLibrary();
  JitLibrary(const JitLibrary&) = delete;
  JitLibrary& operator=(const JitLibrary&) = delete;

  void* symbol(const std::string& name) const;  // Error naming the symbol if missing
  const std::string& key() const { return key_; }
  const std::filesystem::path& path() const { return path_; }
  bool cache_hit() const { return cache_hit_; }      // loaded without compiling
  double compile_seconds() const { return compile_s_; }  // 0 on a hit
  double load_seconds() const { return load_s_; }

 private:
  friend std::shared_ptr<JitLibrary> jit_load(const JitRequest&);
  JitLibrary() = default;
  void* handle_ = nullptr;
  std::string key_;
  std::filesystem::path path_;
  bool cache_hit_ = false;
  double compile_s_ = 0, load_s_ = 0;
};

// The cache key of a request (hex SHA-256), without compiling anything.
std::string jit_key(const JitRequest& request);

// Loads the request's library from the cache, or compiles it there first. Error with the
// compiler's own diagnostics when the source does not compile.
std::shared_ptr<JitLibrary> jit_load(const JitRequest& request);

}  // namespace minigpt::compile
