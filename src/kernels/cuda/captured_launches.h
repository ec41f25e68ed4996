// CapturedLaunches: `count` launches of one kernel captured into a CUDA graph, instantiated once
// and replayed. Used to time launch-bound kernels (the bench's graph mode, the autotuner's small
// shapes) without the CPU's per-launch gaps: time per launch = replay time / count().
// Host code over the CUDA runtime API; it times nothing itself.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace minigpt::cuda {

class CapturedLaunches {
 public:
  // Captures `count` calls of launch(stream) on `stream` (which must not be capturing already).
  // Throws Error (and leaves nothing behind) if a launch or the capture fails.
  CapturedLaunches(const std::function<void(cudaStream_t)>& launch, int count, cudaStream_t stream);
  ~CapturedLaunches();
  CapturedLaunches(const CapturedLaunches&) = delete;
  CapturedLaunches& operator=(const CapturedLaunches&) = delete;

  void replay(cudaStream_t stream) const;  // enqueues all `count` launches
  int count() const { return count_; }

  // For launches whose arguments change between replays (a decode step's token and position):
  // the executable graph and its kernel node (for a graph of one kernel; null if it has none),
  // for an update such as gpt_mega_set_node_params.
  cudaGraphExec_t exec() const { return exec_; }
  cudaGraphNode_t kernel_node() const { return kernel_node_; }

 private:
  cudaGraph_t graph_ = nullptr;  // kept: its nodes name what an update of exec_ changes
  cudaGraphNode_t kernel_node_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int count_;
};

}  // namespace minigpt::cuda
