// DeviceGradReducer: DDP's gradient all-reduce for the GPU trainer, on one flat fp32 device
// buffer that holds every gradient, in buckets that can overlap the backward pass. Built only
// with CUDA and NCCL.
//
// How the GPU trainer uses it (between the backward and the clipping), on its compute stream:
//   - not overlapped:  reducer.reduce_all(stream)  - one ncclAllReduce (average) of the buffer;
//   - overlapped:      reducer.bucket_ready(grad_bucket_index(stage, L), stream) from the
//                      backward's hook as each group of gradients is final, then
//                      reducer.finish(stream) after the backward.
// Either way the kernels that follow on `stream` (clipping, AdamW) see the averaged gradients:
// every rank then takes the same step. Nothing here blocks the host, so the whole step, the
// collectives included, can be captured in a CUDA graph (dist/nccl_communicator.h says what
// NCCL requires of that). The host waits where the trainer reads results back, with
// comm.synchronize(stream, what), which is bounded by --dist-timeout.
//
// Buckets: spans of the buffer in backward order. The model's L + 2 buckets come from
// dist/grad_layout.h: flat_grad_buckets(config) for a packed buffer in the canonical order,
// grad_buckets_at(config, offsets) - or the constructor that takes the tensors' pointers - for
// tensors in arena slots; any other layout passes its own spans, which must tile the buffer.
// Overlap: bucket i's all-reduce runs on the reducer's own communication stream after an event
// recorded on the compute stream when the bucket is ready; finish() makes the compute stream
// wait for an event recorded after the last one (a fork and a join, legal inside a capture).
//
// What it does not do: compute, clip or scale gradients (ncclAvg averages), or wait on the host.
#pragma once

#include "dist/grad_layout.h"
#include "dist/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace minigpt::dist {

class DeviceGradReducer {
 public:
  // grads: `count` floats of device memory on comm.device(), alive and in place while this
  // object lives. buckets: spans in backward order; empty means one bucket, the whole buffer.
  DeviceGradReducer(NcclCommunicator& comm, float* grads, size_t count, std::vector<FlatSpan> buckets = {});
  // The model's L + 2 buckets over gradient tensors laid out as `tensors` says: (name, device
  // pointer) in the canonical order - CudaWeights::named(config) of the gradients - in one
  // allocation, gaps allowed between tensors (arena alignment; reduced along, harmlessly).
  DeviceGradReducer(NcclCommunicator& comm, const ModelConfig& config,
                    const std::vector<std::pair<std::string, float*>>& tensors);
  ~DeviceGradReducer();
  DeviceGradReducer(const DeviceGradReducer&) = delete;
  DeviceGradReducer& operator=(const DeviceGradReducer&) = delete;

  // Bucket i's gradients are final on `compute` (their kernels are enqueued there): its
  // all-reduce starts on the communication stream once they have run. Each bucket once a step.
  void bucket_ready(size_t i, cudaStream_t compute);
  // `compute` waits (on the GPU) for every bucket's all-reduce. Error if one was not started.
  void finish(cudaStream_t compute);
  // The whole buffer averaged on `compute` itself: one all-reduce, no overlap.
  void reduce_all(cudaStream_t compute);

  // Timing for the bench (off by default), eager or inside a captured graph (the events are
  // then recorded as the graph's event nodes, cudaEventRecordExternal): finish() also records
  // when the backward ended on the compute stream and when the last all-reduce ended on the
  // communication stream; reduce_all() records around its all-reduce. After the caller
  // synchronised, exposed_ms() is the GPU time between the two (0 when the all-reduces finished
  // under the backward): the communication not hidden, as the CPU trainer's wait after the
  // backward (dist/grad_buckets.h).
  void enable_timing();
  double exposed_ms() const;
  // The same buckets' all-reduces with no compute beside them, back to back on the
  // communication stream over a scratch buffer of ones (the gradients are untouched): median GPU
  // ms (CUDA events) of `runs` runs, each after a host barrier, after one warm-up run.
  double time_alone_ms(int64_t runs);

  const std::vector<FlatSpan>& buckets() const { return spans_; }
  // The gradients' bytes one step averages (4 x parameters for the model's layout: the
  // planner's DDP payload); reduced_bytes() adds the gaps between tensors that travel along.
  int64_t payload_bytes() const { return payload_bytes_; }
  int64_t reduced_bytes() const { return static_cast<int64_t>(count_ * sizeof(float)); }
  NcclCommunicator& comm() const { return comm_; }

 private:
  void release() noexcept;

  NcclCommunicator& comm_;
  float* grads_;
  size_t count_;
  std::vector<FlatSpan> spans_;
  int64_t payload_bytes_;
  std::vector<char> started_;           // this step, per bucket
  cudaStream_t comm_stream_ = nullptr;  // the all-reduces of the overlapped mode
  std::vector<cudaEvent_t> ready_;      // per bucket, recorded on the compute stream
  cudaEvent_t done_ = nullptr;          // recorded on comm_stream_ after the last all-reduce
  cudaEvent_t timed_backward_end_ = nullptr, timed_comm_end_ = nullptr;  // enable_timing()
};

}  // namespace minigpt::dist
