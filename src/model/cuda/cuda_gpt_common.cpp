// What cuda_gpt.h declares that is the same with and without CUDA.
#include "model/cuda/cuda_gpt.h"

namespace minigpt {

const char* path_name(CudaGPTOptions::Path path) {
  switch (path) {
    case CudaGPTOptions::Path::Mega: return "mega";
    case CudaGPTOptions::Path::Fused: return "fused";
    case CudaGPTOptions::Path::PerOp: return "per-op";
    case CudaGPTOptions::Path::Cublas: return "cublas";
  }
  return "?";
}

}  // namespace minigpt
