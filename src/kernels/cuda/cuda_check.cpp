// The throwing half of cuda_check.h, compiled by the host compiler (fmt and Error live here).
#include "kernels/cuda/cuda_check.h"

#include "core/error.h"

namespace minigpt::cuda {

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  MINIGPT_FAIL("CUDA call {} failed at {}:{}: {} ({})", what, file, line,
               cudaGetErrorString(status), cudaGetErrorName(status));
}

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace minigpt::cuda
