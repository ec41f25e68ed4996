// Finding a program to run: `name` as given when it holds a '/', else the first executable
// regular file of that name on $PATH (what a shell's `command -v` finds). Used by the JIT (the
// host compiler) and by `--gpus N` (mpirun).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace minigpt {

std::optional<std::filesystem::path> find_executable(const std::string& name);

}  // namespace minigpt
