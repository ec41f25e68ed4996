// `--gpus N`: re-execute this binary as N local MPI ranks (local_ranks.h).
#include "dist/local_ranks.h"

#include "core/device_info.h"
#include "core/error.h"
#include "core/executable.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace minigpt::dist {

bool launched_by_mpirun() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr && *size != '\0';
}

int local_rank_count() {
  const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (env == nullptr || *env == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  return *end == '\0' && n >= 1 && n <= 1 << 20 ? static_cast<int>(n) : 1;
}

std::vector<std::string> local_ranks_command(const std::string& mpirun, const std::string& self_exe,
                                             const std::vector<std::string>& argv, int gpus, bool as_root) {
  std::vector<std::string> out{mpirun};
  if (as_root) out.emplace_back("--allow-run-as-root");
  out.insert(out.end(), {"--bind-to", "none", "-np", std::to_string(gpus), self_exe});
  bool have_dist = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--gpus") {
      ++i;  // and its value
    } else if (a.rfind("--gpus=", 0) == 0) {
      continue;
    } else if (a == "--dist" || a.rfind("--dist=", 0) == 0) {
      if (a == "--dist") ++i;
      out.insert(out.end(), {"--dist", "nccl"});
      have_dist = true;
    } else {
      out.push_back(a);
    }
  }
  if (!have_dist) out.insert(out.end(), {"--dist", "nccl"});
  return out;
}

void start_local_ranks_if_asked(const std::vector<std::string>& argv, int gpus, bool on_cuda, const std::string& command) {
  if (gpus == 0) return;
  MINIGPT_CHECK(on_cuda, "{} --gpus {}: one rank per GPU needs --device cuda", command, gpus);
  MINIGPT_CHECK(!launched_by_mpirun(), "{} --gpus under mpirun: mpirun has started the ranks already; give --dist nccl "
                "instead of --gpus", command);
  if (gpus > 1) exec_local_ranks(argv, gpus, command);
}

void exec_local_ranks(const std::vector<std::string>& argv, int gpus, const std::string& command) {
  const size_t visible = gpu_info().size();
  MINIGPT_CHECK(visible >= static_cast<size_t>(gpus), "{} --gpus {}: {} CUDA GPU{} visible; one rank per GPU needs {}",
                command, gpus, visible, visible == 1 ? " is" : "s are", gpus);
  const std::string mpirun = find_executable("mpirun").value_or("").string();
  MINIGPT_CHECK(!mpirun.empty(), "{} --gpus {}: mpirun is not on PATH (Open MPI: `make setup` installs openmpi-bin)",
                command, gpus);
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  MINIGPT_CHECK(!ec, "{} --gpus: cannot find this executable (/proc/self/exe): {}", command, ec.message());
  const std::vector<std::string> args = local_ranks_command(mpirun, self, argv, gpus, ::geteuid() == 0);
  std::vector<char*> c_args;
  for (const std::string& a : args) c_args.push_back(const_cast<char*>(a.c_str()));
  c_args.push_back(nullptr);
  ::execv(mpirun.c_str(), c_args.data());
  MINIGPT_FAIL("{} --gpus {}: cannot start {}: {}", command, gpus, mpirun, std::strerror(errno));
}

}  // namespace minigpt::dist
