// Error checks for the CUDA layer that also compile under nvcc: MINIGPT_CUDA_CHECK turns a
// failed runtime call into minigpt::Error (naming the call, file:line and CUDA's message), and
// MINIGPT_CUDA_REQUIRE checks a condition. nvcc cannot compile fmt (core/error.h), so the
// messages are built with streams here and the Error is thrown from cuda_check.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

namespace minigpt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line);
[[noreturn]] void throw_error(const std::string& message);  // throws minigpt::Error

// cat("rows ", 3, " too many") -> "rows 3 too many"
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace minigpt::cuda

// Checks one runtime call: MINIGPT_CUDA_CHECK(cudaMalloc(&p, n));
#define MINIGPT_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    const cudaError_t minigpt_cuda_status_ = (call);                                      \
    if (minigpt_cuda_status_ != cudaSuccess)                                              \
      ::minigpt::cuda::throw_cuda_error(minigpt_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: the launch configuration error, if any (does not synchronise).
#define MINIGPT_CUDA_CHECK_LAUNCH() MINIGPT_CUDA_CHECK(cudaGetLastError())

// MINIGPT_CUDA_REQUIRE(rows >= 0, "softmax: bad rows ", rows)
#define MINIGPT_CUDA_REQUIRE(cond, ...) \
  do {                                  \
    if (!(cond)) ::minigpt::cuda::throw_error(::minigpt::cuda::cat(__VA_ARGS__)); \
  } while (0)
