// Device memory primitives the core needs for CUDA storage. Implemented over the CUDA runtime
// when the build has CUDA; otherwise every function throws Error("built without CUDA").
#pragma once

#include <cstddef>

namespace minigpt::cuda_memory {

bool available();              // built with CUDA and at least one device visible
void* allocate(size_t bytes);  // cudaMalloc; throws Error with the CUDA message on failure
void release(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);

}  // namespace minigpt::cuda_memory
