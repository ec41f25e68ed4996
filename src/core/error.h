// minigpt::Error, the one exception type of the project, and MINIGPT_CHECK.
//
// Every failure a user can cause (a malformed file, a wrong shape, an unknown token, a missing
// GPU) becomes an Error whose message names the problem; the CLI prints it and exits non-zero.
// Programming errors inside the engine use the same type: nothing calls abort().
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace minigpt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error with a fmt-formatted message: MINIGPT_CHECK(n > 0, "n must be positive, got {}", n)
#define MINIGPT_CHECK(cond, ...)                                    \
  do {                                                              \
    if (!(cond)) throw ::minigpt::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws Error unconditionally: MINIGPT_FAIL("unknown kernel '{}'", name)
#define MINIGPT_FAIL(...) throw ::minigpt::Error(::fmt::format(__VA_ARGS__))

}  // namespace minigpt
