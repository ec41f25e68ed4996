// The CUDA side of softmax(x, device="cuda"): kernel names and a host-to-host call that copies
// x to the GPU, runs the chosen kernel and copies the result back.
//
// In a build without CUDA (MINIGPT_WITH_CUDA == 0) both functions say so: no kernels, and a
// call is an Error explaining how to get them.
#include "common.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#include <string>
#include <vector>

namespace minigpt::py {

#if MINIGPT_WITH_CUDA == 0

std::vector<std::string> cuda_softmax_kernels() { return {}; }

void cuda_softmax(const float*, float*, int64_t, int64_t, const std::string&) {
  MINIGPT_FAIL("softmax: this module was built without CUDA (configure with -DMINIGPT_CUDA=ON "
               "on a machine with nvcc)");
}

#else

// The CUDA kernels' header (src/kernels/cuda/) is bound here once it lands.
std::vector<std::string> cuda_softmax_kernels() { return {}; }

void cuda_softmax(const float*, float*, int64_t, int64_t, const std::string&) {
  MINIGPT_FAIL("softmax: the CUDA softmax kernels are not bound in this module yet");
}

#endif

}  // namespace minigpt::py
