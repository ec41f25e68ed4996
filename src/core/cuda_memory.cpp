// CUDA storage for Tensor through the CUDA runtime API (host code: no nvcc needed). Without
// CUDA in the build every entry point throws a clear Error instead.
#include "core/cuda_memory.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#if MINIGPT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace minigpt::cuda_memory {

#if MINIGPT_WITH_CUDA

static void check(cudaError_t status, const char* what) {
  MINIGPT_CHECK(status == cudaSuccess, "CUDA {} failed: {}", what, cudaGetErrorString(status));
}

bool available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

void* allocate(size_t bytes) {
  MINIGPT_CHECK(available(), "no CUDA device is visible (cannot allocate {} bytes on the GPU)", bytes);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it: a later launch check must not report this failed allocation
    MINIGPT_FAIL("CUDA cudaMalloc of {} bytes failed: {}", bytes, cudaGetErrorString(status));
  }
  return ptr;
}

void release(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy host->device");
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy device->host");
}
void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy device->device");
}

#else  // built without CUDA

bool available() { return false; }
[[noreturn]] static void no_cuda() { MINIGPT_FAIL("this minigpt was built without CUDA (configure with -DMINIGPT_CUDA=ON)"); }
void* allocate(size_t) { no_cuda(); }
void release(void*) noexcept {}
void copy_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_to_host(void*, const void*, size_t) { no_cuda(); }
void copy_device_to_device(void*, const void*, size_t) { no_cuda(); }

#endif

}  // namespace minigpt::cuda_memory
