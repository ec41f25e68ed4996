#include "kernels/cuda/captured_launches.h"

#include "kernels/cuda/cuda_check.h"

namespace minigpt::cuda {

CapturedLaunches::CapturedLaunches(const std::function<void(cudaStream_t)>& launch, int count,
                                   cudaStream_t stream)
    : count_(count) {
  cudaGraph_t graph = nullptr;
  MINIGPT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < count; ++i) launch(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // end the capture before the error propagates
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  MINIGPT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  MINIGPT_CUDA_CHECK(instantiated);
}

CapturedLaunches::~CapturedLaunches() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void CapturedLaunches::replay(cudaStream_t stream) const {
  MINIGPT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace minigpt::cuda
