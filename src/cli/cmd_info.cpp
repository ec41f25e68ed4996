// `minigpt info`: what this binary is and what it sees: version and build, compiler, CPU brand
// and vector features, the ISA the CPU kernels run (core/isa.h), the thread count, GPUs visible
// to the CUDA runtime, and the versions of the libraries linked in. Plain `key: value` lines; nothing is measured here.
#include "cli/commands.h"
#include "core/device_info.h"
#include "core/isa.h"
#include "minigpt/build_info.h"

#include <CLI/Version.hpp>
#include <cblas.h>  // OpenBLAS's cblas.h: openblas_get_config()
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstdlib>
#include <string>

namespace minigpt::cli {

namespace {

void print_info(const GlobalOptions& global) {
  const CpuInfo& cpu = cpu_info();
  auto line = [](std::string_view key, const std::string& value) {
    fmt::print("{:<14} {}\n", fmt::format("{}:", key), value);
  };
  line("minigpt", fmt::format("{} (git {})", build::kVersion, build::kGitRevision));
  line("build", fmt::format("{}, CUDA {}", build::kBuildType,
                            MINIGPT_WITH_CUDA ? fmt::format("on ({}, sm {})", build::kCudaVersion,
                                                            build::kCudaArchitectures)
                                              : std::string("off")));
  line("compiler", build::kCompiler);
  line("cpu", fmt::format("{} ({} logical cores)", cpu.brand, cpu.logical_cores));
  line("cpu features", cpu.features().empty() ? std::string("none of avx2/fma/avx512") : cpu.features());
  std::string isas;
  for (const Isa isa : supported_isas()) isas += (isas.empty() ? "" : ", ") + std::string(isa_name(isa));
  const char* forced = std::getenv("MINIGPT_ISA");
  line("isa", fmt::format("{} ({}; this CPU runs {})", isa_name(active_isa()),
                          forced && *forced ? "MINIGPT_ISA" : "the best; set with MINIGPT_ISA", isas));
  line("threads", fmt::format("{}{}", global.resolved_threads(),
                              global.threads > 0 ? " (-t)" : " (every core; set with -t)"));
  const auto gpus = gpu_info();
  if (gpus.empty()) {
    line("gpus", MINIGPT_WITH_CUDA ? "none visible" : "none (built without CUDA)");
  }
  for (const GpuInfo& g : gpus) {
    line(fmt::format("gpu {}", g.index),
         fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB, driver {}, runtime {}", g.name,
                     g.cc_major, g.cc_minor, g.sm_count,
                     static_cast<double>(g.memory_bytes) / (1 << 30),
                     static_cast<double>(g.l2_bytes) / (1 << 20), g.driver_version,
                     g.runtime_version));
  }
  std::string blas = openblas_get_config();
  while (!blas.empty() && blas.back() == ' ') blas.pop_back();
  line("openblas", blas);
  line("fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100));
  line("nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR,
                                    NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH));
  line("cli11", CLI11_VERSION);
  line("zlib", zlibVersion());
}

}  // namespace

void add_info_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("info", "Version, build, CPU features, GPUs and library versions");
  cmd->callback([&global] { print_info(global); });
}

}  // namespace minigpt::cli
