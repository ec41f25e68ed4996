// The CUDA side of softmax(x, device="cuda"): kernel names and a host-to-host call that copies
// x to the GPU, runs the chosen kernel and copies the result back.
//
// The launchers are src/kernels/cuda/softmax.h; fused_tuned goes through the autotuner and its
// on-disk cache (autotune.h). In a build without CUDA (MINIGPT_WITH_CUDA == 0) both functions
// say so: no kernels, and a call is an Error explaining how to get them.
#include "common.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#include <algorithm>
#include <string>
#include <vector>

#if MINIGPT_WITH_CUDA
#include "core/cuda_memory.h"
#include "kernels/cuda/autotune.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"

#include <cuda_runtime_api.h>
#endif

namespace minigpt::py {

#if MINIGPT_WITH_CUDA == 0

std::vector<std::string> cuda_softmax_kernels() { return {}; }

void cuda_softmax(const float*, float*, int64_t, int64_t, const std::string&) {
  MINIGPT_FAIL("softmax: this module was built without CUDA (configure with -DMINIGPT_CUDA=ON "
               "on a machine with nvcc)");
}

#else

namespace {

// cudaMalloc'd bytes released on scope exit (an Error mid-way must not leak device memory).
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : ptr(static_cast<float*>(cuda_memory::allocate(bytes))) {}
  ~DeviceBuffer() { cuda_memory::release(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* ptr;
};

}  // namespace

// naive, smem: the three-pass kernels. fused: the fused kernel with fused_default_config (no
// tuning, so a first call is as fast as any). fused_tuned: the config the autotuner picks for
// this shape, from the default autotune cache (a sweep the first time a shape bucket is seen).
std::vector<std::string> cuda_softmax_kernels() {
  if (!cuda_memory::available()) return {};
  return {"naive", "smem", "fused", "fused_tuned"};
}

void cuda_softmax(const float* x, float* y, int64_t rows, int64_t cols, const std::string& kernel) {
  const auto known = cuda_softmax_kernels();
  MINIGPT_CHECK(!known.empty(), "softmax: no CUDA device is visible");
  MINIGPT_CHECK(std::find(known.begin(), known.end(), kernel) != known.end(),
                "softmax: unknown CUDA kernel '{}' (known: naive, smem, fused, fused_tuned)", kernel);
  if (rows == 0) return;  // no launch for an empty batch (design.md)
  const size_t bytes = static_cast<size_t>(shape_numel({rows, cols})) * sizeof(float);
  DeviceBuffer dx(bytes), dy(bytes);
  cuda_memory::copy_to_device(dx.ptr, x, bytes);
  const cudaStream_t stream = nullptr;  // the legacy default stream: copies before and after order with it
  if (kernel == "naive") {
    cuda::softmax_naive(dx.ptr, dy.ptr, rows, cols, stream);
  } else if (kernel == "smem") {
    cuda::softmax_smem(dx.ptr, dy.ptr, rows, cols, stream);
  } else if (kernel == "fused") {
    cuda::softmax_fused(dx.ptr, dy.ptr, rows, cols, cuda::fused_default_config(cols, cuda::fused_limits()), stream);
  } else {
    cuda::AutotuneOptions options;
    options.cache_path = cuda::default_autotune_cache_path();
    const cuda::AutotuneResult tuned = cuda::autotune_fused(dx.ptr, rows, cols, options, stream);
    cuda::softmax_fused(dx.ptr, dy.ptr, rows, cols, tuned.config, stream);
  }
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cuda_memory::copy_to_host(y, dy.ptr, bytes);
}

#endif

}  // namespace minigpt::py
