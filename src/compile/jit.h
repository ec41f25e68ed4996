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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace minigpt::compile {

// The system C++ compiler as the JIT runs it.
struct HostCompiler {
  std::string path;     // absolute; $MINIGPT_CXX, else $CXX, else c++ / g++ / clang++ on PATH
  std::string version;  // first line of `path --version`
  std::vector<std::string> flags;  // -O3 -march=native -fPIC -shared ... (recorded, hashed)
  std::string describe() const;    // "c++ (Debian 12.2.0-14) 12.2.0 [/usr/bin/c++] -O3 ..."
};
const HostCompiler& host_compiler();  // found once; Error naming what is missing if none

// The flags, and why these: the engine's kernels are built by the same GCC with -O3, their
// AVX-512 paths (the ones that run on an AVX-512 machine) through target("avx512f"), where
// GCC's default for C++, -ffp-contract=fast, turns a * b + c into an FMA. Generated code must
// round as those kernels do, so it is compiled with the same contraction rule, spelled out
// (clang's default differs): measured on layernorm's `(x - mean) * rstd * w + b` at C = 64,
// a generated loop matches eager on all 262144 outputs with -ffp-contract=fast and differs on
// 57246 with -ffp-contract=off. Eager's fallbacks for the other ISAs (layernorm, attention,
// GELU as plain loops, built for baseline x86-64 without FMA) never contract, so under avx2
// and scalar isa_flags() replaces it with -ffp-contract=off (below). -march=native: the
// generated kernels are for this machine only (the CPU is in the key).
inline constexpr const char* kJitFlags[] = {"-O3", "-march=native", "-std=c++20", "-fPIC",
                                            "-shared", "-ffp-contract=fast"};
// Under MINIGPT_ISA (core/isa.h) the generated code keeps to the forced ISA as the engine's
// kernels do: avx2 adds -mno-avx512f (no AVX-512 in any loop the compiler vectorises), scalar
// adds -mno-avx (SSE2, the x86-64 baseline, and nothing wider). Both also round as eager's
// plain-loop fallbacks do: -ffp-contract=off replaces kJitFlags' -ffp-contract=fast (the
// generated GEMMs spell their FMAs as intrinsics and keep them). On the shipped model under
// avx2, every grammar probe's logits: max |compiled - eager| 1.14e-5 with contraction,
// 5.96e-6 without; 1.05e-5 and 1.29e-5 with it left on only in the layernorms or only in the
// attention. host_compiler().flags holds them, so each ISA has its own cache entries.
std::vector<std::string> isa_flags();

// What the CPU offers (vendor, family, model, name and the kernel's feature flags, from
// /proc/cpuinfo), read once: part of every key, since -march=native depends on it.
const std::string& cpu_features();

// Hex SHA-256 of bytes (OpenSSL's libcrypto). For cache keys and checksums.
std::string sha256_hex(std::string_view bytes);

// The text a cache key hashes (this JIT's and the CUDA one's): a header line, then each field
// length-prefixed ("name size\nvalue\n"), so that no two different requests serialise alike.
class KeyText {
 public:
  explicit KeyText(std::string_view header) : text_(std::string(header) + "\n") {}
  void field(std::string_view name, std::string_view value);
  std::string sha256() const { return sha256_hex(text_); }

 private:
  std::string text_;
};

std::filesystem::path default_cache_dir();

struct JitRequest {
  std::string source;       // one translation unit, self-contained (includes only the C/C++ std)
  std::string key_extra;    // what else the code depends on: codegen version, graph hash, mode
  std::string name;         // for logs: "gpt_B2_T16"
  std::filesystem::path cache_dir;  // empty: default_cache_dir()
  // Appended to the compiler's flags (hashed): "-DMG_UNROLL=4" for an autotune variant,
  // "-mno-avx512f" to build an AVX2 variant on an AVX-512 machine.
  std::vector<std::string> extra_flags;
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
  const std::string& so_sha256() const { return so_sha256_; }  // of the bytes loaded
  bool cache_hit() const { return cache_hit_; }  // loaded without compiling (also when another
                                                 // process compiled it while this one waited)
  double compile_seconds() const { return compile_s_; }  // 0 on a hit
  double compile_cpu_seconds() const { return compile_cpu_s_; }  // the compiler's CPU time
  double load_seconds() const { return load_s_; }

 private:
  friend std::shared_ptr<JitLibrary> jit_load(const JitRequest&);
  JitLibrary() = default;
  void* handle_ = nullptr;
  std::string key_;
  std::filesystem::path path_;  // the cache entry's <key>.so
  std::string so_sha256_;
  bool cache_hit_ = false;
  double compile_s_ = 0, compile_cpu_s_ = 0, load_s_ = 0;
};

// One cache entry's check, shared by this JIT and the CUDA one (cuda/jit_cuda.cpp): `json`
// parses, has "format" == format and "key" == key, `builder_problem(json)` (the compiler,
// flags, architecture... the caller's own fields) returns "", and `binary` has the size and
// SHA-256 the .json records as "<field>_bytes" and "<field>_sha256". Never throws for a bad
// entry: `problem` says what is wrong ("missing" when there is no .json), and the bytes are
// empty.
struct CheckedEntry {
  std::vector<uint8_t> bytes;
  std::string sha256;
  std::string problem;  // empty when usable
};
CheckedEntry check_cache_entry(const std::filesystem::path& json, const std::filesystem::path& binary, int format,
                               const std::string& key, const std::string& field,
                               const std::function<std::string(const nlohmann::json&)>& builder_problem);

// The cache key of a request (hex SHA-256), without compiling anything.
std::string jit_key(const JitRequest& request);

// Loads the request's library from the cache, or compiles it there first. Error with the
// compiler's own diagnostics when the source does not compile.
// How: the .json and the .so are read and checked (key, compiler, checksum); the verified bytes
// are written to a private file (unique name, so dlopen's cache by path never hands back an
// older library), dlopen'ed and unlinked: what runs is exactly what was checked, even if the
// entry is replaced meanwhile. A miss takes an flock on <key>.lock (released by the kernel if
// the process dies), checks again, compiles in a private folder (-frandom-seed=<key>, so every
// process produces the same bytes), and renames the .so, the .cpp and last the .json into
// place: concurrent callers wait for one compile and then load its entry.
std::shared_ptr<JitLibrary> jit_load(const JitRequest& request);

}  // namespace minigpt::compile
