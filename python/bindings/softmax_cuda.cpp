// The CUDA side of the softmax bindings: kernel names; softmax(x, device="cuda"), a host-to-host
// call that copies x to the GPU, runs the chosen kernel and copies the result back; and
// softmax_cuda_into(x, y), which runs a kernel on arrays already on the GPU (PyTorch tensors,
// through DLPack) on the caller's stream, with no copy, no allocation and no synchronisation,
// so that it can be captured into a CUDA graph beside torch and Triton kernels.
//
// The launchers are src/kernels/cuda/softmax.h; fused_tuned goes through the autotuner and its
// on-disk cache (autotune.h). In a build without CUDA (MINIGPT_WITH_CUDA == 0) both functions
// say so: no kernels, and a call is an Error explaining how to get them.
#include "common.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#if MINIGPT_WITH_CUDA
#include "core/cuda_memory.h"
#include "kernels/cuda/autotune.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#endif

namespace minigpt::py {

#if MINIGPT_WITH_CUDA == 0

std::vector<std::string> cuda_softmax_kernels() { return {}; }

void cuda_softmax(const float*, float*, int64_t, int64_t, const std::string&) {
  MINIGPT_FAIL("softmax: this module was built without CUDA (configure with -DMINIGPT_CUDA=ON "
               "on a machine with nvcc)");
}

void cuda_softmax_device(const float*, float*, int64_t, int64_t, int, const std::string&, uintptr_t) {
  MINIGPT_FAIL("softmax_cuda_into: this module was built without CUDA (configure with "
               "-DMINIGPT_CUDA=ON on a machine with nvcc)");
}

#else

// naive, smem: the three-pass kernels. fused: the fused kernel with fused_default_config (no
// tuning, so a first call is as fast as any). fused_tuned: the config the autotuner picks for
// this shape, from the default autotune cache (a sweep the first time a shape bucket is seen).
std::vector<std::string> cuda_softmax_kernels() {
  if (!cuda_memory::available()) return {};
  return {"naive", "smem", "fused", "fused_tuned"};
}

namespace {

// cudaMalloc'd bytes released on scope exit (an Error mid-way must not leak device memory).
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : ptr(static_cast<float*>(cuda_memory::allocate(bytes))) {}
  ~DeviceBuffer() { cuda_memory::release(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* ptr;
};

void check_kernel(const std::string& kernel) {
  const auto known = cuda_softmax_kernels();
  MINIGPT_CHECK(!known.empty(), "softmax: no CUDA device is visible");
  MINIGPT_CHECK(std::find(known.begin(), known.end(), kernel) != known.end(),
                "softmax: unknown CUDA kernel '{}' (known: naive, smem, fused, fused_tuned)", kernel);
}

// fused_tuned's config per shape bucket, looked up (or tuned) once per process: later calls do
// no file I/O and no synchronisation, so they may run inside a graph capture.
cuda::FusedConfig tuned_config(const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::string, cuda::FusedConfig> seen;
  const std::string bucket = cuda::shape_bucket(rows, cols);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = seen.find(bucket); it != seen.end()) return it->second;
  cuda::AutotuneOptions options;
  options.cache_path = cuda::default_autotune_cache_path();
  const cuda::FusedConfig config = cuda::autotune_fused(x, rows, cols, options, stream).config;
  seen.emplace(bucket, config);
  return config;
}

// One launch of `kernel` on device arrays, enqueued on `stream` (rows >= 1).
void launch(const std::string& kernel, const float* x, float* y, int64_t rows, int64_t cols,
            cudaStream_t stream) {
  if (kernel == "naive") {
    cuda::softmax_naive(x, y, rows, cols, stream);
  } else if (kernel == "smem") {
    cuda::softmax_smem(x, y, rows, cols, stream);
  } else if (kernel == "fused") {
    cuda::softmax_fused(x, y, rows, cols, cuda::fused_default_config(cols, cuda::fused_limits()), stream);
  } else {
    cuda::softmax_fused(x, y, rows, cols, tuned_config(x, rows, cols, stream), stream);
  }
}

}  // namespace

void cuda_softmax(const float* x, float* y, int64_t rows, int64_t cols, const std::string& kernel) {
  check_kernel(kernel);
  if (rows == 0) return;  // no launch for an empty batch (docs/ARCHITECTURE.md)
  const size_t bytes = static_cast<size_t>(shape_numel({rows, cols})) * sizeof(float);
  DeviceBuffer dx(bytes), dy(bytes);
  cuda_memory::copy_to_device(dx.ptr, x, bytes);
  const cudaStream_t stream = nullptr;  // the legacy default stream: copies before and after order with it
  launch(kernel, dx.ptr, dy.ptr, rows, cols, stream);
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cuda_memory::copy_to_host(y, dy.ptr, bytes);
}

void cuda_softmax_device(const float* x, float* y, int64_t rows, int64_t cols, int device,
                         const std::string& kernel, uintptr_t stream) {
  check_kernel(kernel);
  int current = 0;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&current));
  MINIGPT_CHECK(device == current, "softmax_cuda_into: the arrays are on GPU {}, the current device is {}",
                device, current);
  if (rows == 0) return;  // no launch for an empty batch (docs/ARCHITECTURE.md)
  launch(kernel, x, y, rows, cols, reinterpret_cast<cudaStream_t>(stream));
}

#endif

}  // namespace minigpt::py
