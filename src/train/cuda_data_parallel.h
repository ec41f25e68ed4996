// Data parallel on GPUs: connects a CudaTrainStep to the NCCL communicator of its rank.
//
// Overlapped (the default, as the CPU trainer): the step's stage hook, called inside its CUDA
// graph as the backward finishes each group of gradients (the head, block L-1 .. 0, the
// embeddings), hands that group's bucket of the flat gradient buffer to a DeviceGradReducer
// (dist/device_grad_reducer.h): an event on the compute stream, and the bucket's in-place
// ncclAllReduce (ncclAvg) on the reducer's communication stream once the event has passed, so
// the all-reduce of block l runs while the backward computes blocks l-1 .. 0. The grad hook,
// between the backward and the clipping, makes the compute stream wait for every bucket, so
// every rank clips and steps with the mean gradient. After the whole backward (kAfterBackward):
// one ncclAllReduce of the whole buffer on the compute stream, nothing overlapped (the path
// before issue 16's overlap; kept for the bit-for-bit test and for comparison).
//
// Averaging over one rank leaves every gradient as it was, so both modes train bit for bit as
// the plain GPU step; over N ranks each bucket is the same ncclAvg of the same floats, so the
// two modes agree bit for bit too (NCCL's result does not depend on how the buffer is split).
// The arena's alignment gaps travel with the buckets; they are zeros and stay zeros.
//
// Timed always (two event nodes in the graph): exposed_ms() is the last step's communication
// not hidden under the backward, GPU time from the backward's end on the compute stream to the
// last all-reduce's end (0 if they ended first; kAfterBackward: the whole all-reduce), the GPU
// analogue of the CPU trainer's wait after the backward; alone_ms() times the same buckets
// with no compute. The step's wait for its graph becomes NcclCommunicator::synchronize, bounded
// by --dist-timeout, so a dead or stuck peer ends the step with an Error naming this rank.
//
// What it does not do: split the batch or broadcast the weights (Trainer does, as on the CPU).
#pragma once

#include "dist/communicator.h"
#include "train/cuda_train_step.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace minigpt {

enum class GradSync {
  kOverlapped,     // a bucket per stage, all-reduced on a second stream as the backward goes on
  kAfterBackward,  // one all-reduce of the whole buffer after the backward
};

class CudaDataParallel {
 public:
  // comm must be an NcclCommunicator (`--dist nccl`; any world size, 1 included); comm and step
  // must outlive this object, and this object the step's graph (destroy the step first). Call
  // before the step's first step(). Error naming the engine otherwise, or without NCCL.
  CudaDataParallel(CudaTrainStep& step, dist::Communicator& comm, GradSync mode = GradSync::kOverlapped);
  ~CudaDataParallel();
  CudaDataParallel(const CudaDataParallel&) = delete;
  CudaDataParallel& operator=(const CudaDataParallel&) = delete;

  GradSync mode() const;
  size_t buckets() const;  // L + 2 overlapped, 1 after the backward
  // The last step's exposed communication in ms (call after step() returned).
  double exposed_ms() const;
  // The buckets' all-reduces alone: median GPU ms over `runs` runs (every rank must call it).
  double alone_ms(int64_t runs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minigpt
