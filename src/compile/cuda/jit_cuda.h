// The CUDA JIT: generated CUDA C (codegen_cuda.h) -> NVRTC -> a cubin for one GPU
// architecture, through an on-disk cache with the C++ JIT's guarantees (jit.h).
//
// Cache folder: jit.h's default_cache_dir() ($MINIGPT_CACHE_DIR, ...). One entry per key:
//   <key>.cubin  the binary          <key>.json  what built it, and the cubin's SHA-256
//   <key>.cu     the source (for people; never read back to build)
// The key is the SHA-256 of everything that changes the binary: the source text, the caller's
// key_extra (code generator version, graph hash, variant), NVRTC's version, every option and
// the target architecture. An entry is used only when its .json parses, names the same key,
// NVRTC version, options and architecture, and the cubin has the recorded size and checksum:
// a corrupt, truncated or stale entry is rebuilt, never used. A miss takes an flock on
// <key>.lock, checks again, compiles, and renames the .cubin, the .cu and last the .json into
// place, so concurrent processes wait for one compile and all load the same bytes.
//
// NVRTC needs no GPU: compiling (and this cache) works on a machine without one, which is how
// the CPU-side tests check every generated source. Loading the cubin is runner_cuda's job.
//
// What it does not do: load or launch (cuda/cuda_module.h), generate code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace minigpt::compile {

// NVRTC's version, "13.0" (nvrtcVersion).
std::string nvrtc_version();

// The current device's architecture as NVRTC names it: "sm_90a" for compute capability 9.0
// (Hopper's architecture-specific features), "sm_XY" otherwise. Error without a visible GPU.
std::string device_arch();

// The options the JIT compiles with for `arch` (hashed into the key, recorded in the entry):
// --gpu-architecture=<arch>, C++17, -default-device, FMA contraction on (nvcc's default; the
// generated code is compared against eager with a tolerance), no fast math.
std::vector<std::string> nvrtc_options(const std::string& arch);

struct CudaJitRequest {
  std::string source;     // one self-contained CUDA C source (no includes)
  std::string key_extra;  // codegen version, graph hash, variant
  std::string name;       // for logs and NVRTC's program name: "gpt_B2_T16"
  std::string arch;       // "sm_90a"; empty: device_arch()
  std::filesystem::path cache_dir;  // empty: default_cache_dir()
};

struct CudaBinary {
  std::vector<uint8_t> cubin;  // verified bytes
  std::string key, cubin_sha256, arch;
  bool cache_hit = false;
  double compile_s = 0;  // NVRTC's time; 0 on a hit
  double total_s = 0;    // key, lookup (and compile)
  std::filesystem::path path;  // the entry's .cubin
};

std::string cuda_jit_key(const CudaJitRequest& request);

// The request's cubin from the cache, compiling it there first on a miss. Error with NVRTC's
// log (and the source kept as <key>.failed.cu) when the source does not compile.
CudaBinary cuda_jit_compile(const CudaJitRequest& request);

// NVRTC alone, no cache: the PTX of `source` for a virtual or real architecture ("compute_90a",
// "sm_90a"). Error with NVRTC's log. For the tests that check generated sources without a GPU.
std::string nvrtc_compile_ptx(const std::string& source, const std::string& arch, const std::string& name);

}  // namespace minigpt::compile
