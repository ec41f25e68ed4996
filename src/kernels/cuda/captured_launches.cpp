#include "kernels/cuda/captured_launches.h"

#include "kernels/cuda/cuda_check.h"

#include <vector>

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
  if (instantiated != cudaSuccess) {
    cudaGraphDestroy(graph);
    MINIGPT_CUDA_CHECK(instantiated);
  }
  graph_ = graph;
  size_t n = 0;
  MINIGPT_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) MINIGPT_CUDA_CHECK(cudaGraphGetNodes(graph_, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    MINIGPT_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) {
      kernel_node_ = node;
      break;
    }
  }
}

CapturedLaunches::~CapturedLaunches() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CapturedLaunches::replay(cudaStream_t stream) const {
  MINIGPT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace minigpt::cuda
