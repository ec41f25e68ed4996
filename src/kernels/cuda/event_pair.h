// EventPair: two CUDA events (start, stop) made and destroyed with their owner, for timing a
// span of stream work (cudaEventRecord both, cudaEventElapsedTime). Host code.
#pragma once

#include "kernels/cuda/cuda_check.h"

#include <cuda_runtime_api.h>

namespace minigpt::cuda {

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    MINIGPT_CUDA_CHECK(cudaEventCreate(&start));
    MINIGPT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

}  // namespace minigpt::cuda
