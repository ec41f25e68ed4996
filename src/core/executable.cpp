// find_executable (executable.h).
#include "core/executable.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace minigpt {

std::optional<std::filesystem::path> find_executable(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return std::filesystem::absolute(name);
    return std::nullopt;
  }
  const char* env = std::getenv("PATH");
  std::stringstream path(env != nullptr ? env : "");
  std::string dir;
  while (std::getline(path, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace minigpt
