// The CUDA JIT (jit_cuda.h): NVRTC compile, cache key, checked entries, the flock on a miss.
#include "compile/cuda/jit_cuda.h"

#include "compile/file_lock.h"
#include "compile/jit.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "io/file_bytes.h"
#include "kernels/cuda/autotune_cache.h"  // utc_now_iso8601

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace minigpt::compile {

namespace fs = std::filesystem;

namespace {

constexpr int kEntryFormat = 1;  // the .json's layout; bump to orphan every older entry

#define MG_NVRTC_CHECK(call)                                                                   \
  do {                                                                                         \
    const nvrtcResult mg_nvrtc_status_ = (call);                                               \
    MINIGPT_CHECK(mg_nvrtc_status_ == NVRTC_SUCCESS, "nvrtc: {} failed: {}", #call,            \
                  nvrtcGetErrorString(mg_nvrtc_status_));                                      \
  } while (0)

// NVRTC on `source`: the program's log and, when it compiled, the cubin (real arch) or PTX.
struct NvrtcResult {
  bool ok = false;
  std::string log;
  std::vector<uint8_t> cubin;
  std::string ptx;
};

NvrtcResult run_nvrtc(const std::string& source, const std::string& name, const std::vector<std::string>& options, bool want_cubin) {
  nvrtcProgram prog = nullptr;
  MG_NVRTC_CHECK(nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr));
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  NvrtcResult r;
  const nvrtcResult status = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    r.log.resize(log_size);
    nvrtcGetProgramLog(prog, r.log.data());
    r.log.resize(log_size - 1);
  }
  r.ok = status == NVRTC_SUCCESS;
  if (!r.ok && r.log.empty()) r.log = nvrtcGetErrorString(status);
  if (r.ok && want_cubin) {
    size_t n = 0;
    MG_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n));
    r.cubin.resize(n);
    MG_NVRTC_CHECK(nvrtcGetCUBIN(prog, reinterpret_cast<char*>(r.cubin.data())));
  } else if (r.ok) {
    size_t n = 0;
    MG_NVRTC_CHECK(nvrtcGetPTXSize(prog, &n));
    r.ptx.resize(n);
    MG_NVRTC_CHECK(nvrtcGetPTX(prog, r.ptx.data()));
    if (!r.ptx.empty() && r.ptx.back() == '\0') r.ptx.pop_back();
  }
  nvrtcDestroyProgram(&prog);
  return r;
}

struct Entry {
  fs::path cubin, json, cu, lock;
  Entry(const fs::path& dir, const std::string& key)
      : cubin(dir / (key + ".cubin")), json(dir / (key + ".json")), cu(dir / (key + ".cu")), lock(dir / (key + ".lock")) {}
};

// Reads and checks an entry: check_cache_entry with NVRTC's version, the architecture and the
// options.
CheckedEntry check_entry(const Entry& e, const std::string& key, const std::string& arch, const std::vector<std::string>& options) {
  return check_cache_entry(e.json, e.cubin, kEntryFormat, key, "cubin", [&](const nlohmann::json& j) -> std::string {
    if (j.value("nvrtc_version", "") != nvrtc_version() || j.value("arch", "") != arch ||
        j.at("options").get<std::vector<std::string>>() != options)
      return ".json names another NVRTC, architecture or options";
    return "";
  });
}

std::vector<uint8_t> build_entry(const fs::path& dir, const Entry& e, const std::string& key, const CudaJitRequest& request,
                                 const std::string& arch, const std::vector<std::string>& options, double& compile_s) {
  const Timer timer;
  NvrtcResult r = run_nvrtc(request.source, request.name.empty() ? "minigpt_generated" : request.name, options, true);
  compile_s = timer.elapsed_s();
  if (!r.ok) {
    const fs::path failed = dir / (key + ".failed.cu");
    io::write_file_atomic(failed.string(), request.source);
    MINIGPT_FAIL("jit (cuda): NVRTC could not compile '{}' for {}; source kept in {}\noptions: {}\n{}", request.name, arch,
                 failed.string(), fmt::join(options, " "), r.log);
  }
  const std::string sha = sha256_hex(std::string_view(reinterpret_cast<const char*>(r.cubin.data()), r.cubin.size()));
  nlohmann::json j;
  j["format"] = kEntryFormat;
  j["key"] = key;
  j["name"] = request.name;
  j["key_extra"] = request.key_extra;
  j["nvrtc_version"] = nvrtc_version();
  j["arch"] = arch;
  j["options"] = options;
  j["cubin_bytes"] = r.cubin.size();
  j["cubin_sha256"] = sha;
  j["source_sha256"] = sha256_hex(request.source);
  j["compile_seconds"] = compile_s;
  j["created"] = cuda::utc_now_iso8601();
  if (!r.log.empty()) j["log"] = r.log;
  // the binary first, the .json last: an entry is valid only once its .json names the checksum
  io::write_file_atomic(e.cubin.string(), std::span<const uint8_t>(r.cubin));
  io::write_file_atomic(e.cu.string(), request.source);
  io::write_file_atomic(e.json.string(), j.dump(2) + "\n");
  return std::move(r.cubin);
}

}  // namespace

std::string nvrtc_version() {
  static const std::string v = [] {
    int major = 0, minor = 0;
    MG_NVRTC_CHECK(nvrtcVersion(&major, &minor));
    return fmt::format("{}.{}", major, minor);
  }();
  return v;
}

std::string device_arch() {
  int dev = 0, major = 0, minor = 0;
  const cudaError_t st = cudaGetDevice(&dev);
  MINIGPT_CHECK(st == cudaSuccess, "jit (cuda): no CUDA device visible ({})", cudaGetErrorString(st));
  // two attributes, not cudaGetDeviceProperties (which fills every field, some slow to query: it
  // runs on every compile, cache hits included)
  cudaError_t sp = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (sp == cudaSuccess) sp = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  MINIGPT_CHECK(sp == cudaSuccess, "jit (cuda): cannot read the device's compute capability ({})", cudaGetErrorString(sp));
  // Hopper: sm_90a (wgmma, setmaxnreg: code for exactly this architecture)
  return fmt::format("sm_{}{}{}", major, minor, major == 9 && minor == 0 ? "a" : "");
}

std::vector<std::string> nvrtc_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "-default-device", "--fmad=true", "-lineinfo"};
}

std::string cuda_jit_key(const CudaJitRequest& request) {
  const std::string arch = request.arch.empty() ? device_arch() : request.arch;
  KeyText key("minigpt cuda jit key v1");
  key.field("source", request.source);
  key.field("key_extra", request.key_extra);
  key.field("nvrtc", nvrtc_version());
  key.field("arch", arch);
  for (const std::string& o : nvrtc_options(arch)) key.field("option", o);
  return key.sha256();
}

CudaBinary cuda_jit_compile(const CudaJitRequest& request) {
  const Timer total;
  CudaBinary b;
  b.arch = request.arch.empty() ? device_arch() : request.arch;
  const std::vector<std::string> options = nvrtc_options(b.arch);
  CudaJitRequest keyed = request;
  keyed.arch = b.arch;
  b.key = cuda_jit_key(keyed);
  const fs::path dir = request.cache_dir.empty() ? default_cache_dir() : request.cache_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MINIGPT_CHECK(fs::is_directory(dir), "jit (cuda): cannot create the cache folder {}: {}", dir.string(), ec.message());
  const Entry e(dir, b.key);
  b.path = e.cubin;
  CheckedEntry c = check_entry(e, b.key, b.arch, options);
  if (c.problem.empty()) {
    b.cache_hit = true;
  } else {
    const FileLock lock(e.lock);
    c = check_entry(e, b.key, b.arch, options);  // another process may have built it meanwhile
    if (c.problem.empty()) {
      b.cache_hit = true;
    } else {
      if (c.problem != "missing")
        fmt::print(stderr, "minigpt jit (cuda): cache entry {} for '{}' is bad ({}): rebuilding\n", e.json.string(), request.name,
                   c.problem);
      c.bytes = build_entry(dir, e, b.key, request, b.arch, options, b.compile_s);
      c.sha256 = sha256_hex(std::string_view(reinterpret_cast<const char*>(c.bytes.data()), c.bytes.size()));
    }
  }
  b.cubin = std::move(c.bytes);
  b.cubin_sha256 = c.sha256;
  b.total_s = total.elapsed_s();
  return b;
}

std::string nvrtc_compile_ptx(const std::string& source, const std::string& arch, const std::string& name) {
  std::vector<std::string> options = nvrtc_options(arch);
  const NvrtcResult r = run_nvrtc(source, name, options, false);
  MINIGPT_CHECK(r.ok, "nvrtc: '{}' does not compile for {}:\n{}", name, arch, r.log);
  return r.ptx;
}

}  // namespace minigpt::compile
