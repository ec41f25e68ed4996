// What machine are we on: CPU brand and vector extensions, GPUs visible to the CUDA runtime.
// Used by `minigpt info`, by the run-time kernel dispatch (AVX2 / AVX-512) and by every
// benchmark table's header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt {

struct CpuInfo {
  std::string brand;     // cpuid brand string, e.g. "Intel(R) Xeon(R) Processor"
  int logical_cores = 1; // std::thread::hardware_concurrency()
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;  // AVX-512 Foundation (512-bit float ops)
  bool avx512bw = false;
  std::string features() const;  // "avx2 fma avx512f avx512bw"
};

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
  int driver_version = 0;        // e.g. 13000
  int runtime_version = 0;
};

const CpuInfo& cpu_info();          // read once, cached
std::vector<GpuInfo> gpu_info();    // empty when built without CUDA or no GPU is visible
std::string machine_summary(int threads);  // one line: CPU, threads, GPU (for bench headers)

}  // namespace minigpt
