#include "core/device_info.h"

#include "minigpt/build_info.h"

#include <fmt/format.h>

#include <cpuid.h>
#include <cstring>
#include <thread>

#if MINIGPT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace minigpt {

static std::string read_brand() {
  unsigned regs[12] = {};
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext < 0x80000004u) return "unknown CPU";
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  char text[49] = {};
  std::memcpy(text, regs, 48);
  std::string s(text);
  const auto first = s.find_first_not_of(' ');
  return first == std::string::npos ? "unknown CPU" : s.substr(first);
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo c;
    c.brand = read_brand();
    c.logical_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    return c;
  }();
  return info;
}

std::string CpuInfo::features() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  return s.empty() ? "none" : s;
}

std::vector<GpuInfo> gpu_info() {
  std::vector<GpuInfo> gpus;
#if MINIGPT_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return gpus;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
    g.l2_bytes = p.l2CacheSize;
    g.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    g.driver_version = driver;
    g.runtime_version = runtime;
    gpus.push_back(g);
  }
#endif
  return gpus;
}

std::string machine_summary(int threads) {
  const CpuInfo& c = cpu_info();
  std::string s = fmt::format("{} ({} cores, {}), {} thread{}", c.brand, c.logical_cores,
                              c.features(), threads, threads == 1 ? "" : "s");
  for (const GpuInfo& g : gpu_info())
    s += fmt::format("; GPU{} {} (sm_{}{})", g.index, g.name, g.cc_major, g.cc_minor);
  return s;
}

}  // namespace minigpt
