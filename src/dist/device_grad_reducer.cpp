#include "dist/device_grad_reducer.h"

#include "core/error.h"
#include "core/timer.h"  // median
#include "kernels/cuda/cuda_check.h"

#include <algorithm>

namespace minigpt::dist {

namespace {

// Float offsets of the tensors from the first one (which must come first in memory too).
std::vector<size_t> offsets_from_first(const std::vector<std::pair<std::string, float*>>& tensors) {
  MINIGPT_CHECK(!tensors.empty(), "DeviceGradReducer: no gradient tensors");
  std::vector<size_t> offsets;
  for (const auto& [name, p] : tensors) {
    MINIGPT_CHECK(p != nullptr && p >= tensors.front().second,
                  "DeviceGradReducer: gradient {} lies before {}, the first tensor of the layout", name,
                  tensors.front().first);
    offsets.push_back(static_cast<size_t>(p - tensors.front().second));
  }
  return offsets;
}

// A timing event: inside a capture it must become an event node of the graph (External), which
// the flag is invalid for outside one.
void record_timing(cudaEvent_t event, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MINIGPT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  MINIGPT_CUDA_CHECK(cudaEventRecordWithFlags(
      event, stream, capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault));
}

size_t spans_end(const std::vector<FlatSpan>& spans) {
  size_t end = 0;
  for (const FlatSpan& s : spans) end = std::max(end, s.offset + s.count);
  return end;
}

}  // namespace

DeviceGradReducer::DeviceGradReducer(NcclCommunicator& comm, const ModelConfig& config,
                                     const std::vector<std::pair<std::string, float*>>& tensors)
    : DeviceGradReducer(comm, tensors.empty() ? nullptr : tensors.front().second,
                        spans_end(grad_buckets_at(config, offsets_from_first(tensors))),
                        grad_buckets_at(config, offsets_from_first(tensors))) {
  payload_bytes_ = 4 * config.parameter_count();
}

DeviceGradReducer::DeviceGradReducer(NcclCommunicator& comm, float* grads, size_t count,
                                     std::vector<FlatSpan> buckets)
    : comm_(comm), grads_(grads), count_(count), spans_(std::move(buckets)),
      payload_bytes_(static_cast<int64_t>(count * sizeof(float))) {
  MINIGPT_CHECK(grads_ != nullptr && count_ > 0, "DeviceGradReducer: no gradient buffer ({} floats)", count_);
  if (spans_.empty()) spans_.push_back({0, count_});
  check_flat_spans(spans_, count_);
  started_.assign(spans_.size(), 0);
  MINIGPT_CUDA_CHECK(cudaSetDevice(comm_.device()));
  try {
    // Non-blocking: no implicit ordering with the legacy default stream; events order it.
    MINIGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    ready_.assign(spans_.size(), nullptr);
    for (cudaEvent_t& e : ready_) MINIGPT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MINIGPT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  } catch (...) {
    release();  // what was created (null handles are skipped)
    throw;
  }
}

DeviceGradReducer::~DeviceGradReducer() { release(); }

void DeviceGradReducer::release() noexcept {
  for (cudaEvent_t e : ready_)
    if (e != nullptr) cudaEventDestroy(e);
  ready_.clear();
  for (cudaEvent_t* e : {&done_, &timed_backward_end_, &timed_comm_end_}) {
    if (*e != nullptr) cudaEventDestroy(*e);
    *e = nullptr;
  }
  // Destroying a stream with work queued is allowed: the work completes first, asynchronously.
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  comm_stream_ = nullptr;
}

void DeviceGradReducer::bucket_ready(size_t i, cudaStream_t compute) {
  MINIGPT_CHECK(i < spans_.size(), "gradient bucket {} of {}", i, spans_.size());
  MINIGPT_CHECK(!started_[i], "gradient bucket {} reported ready twice in one step", i);
  started_[i] = 1;
  MINIGPT_CUDA_CHECK(cudaEventRecord(ready_[i], compute));
  MINIGPT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_[i], 0));
  comm_.all_reduce_avg(grads_ + spans_[i].offset, spans_[i].count, comm_stream_);
}

void DeviceGradReducer::finish(cudaStream_t compute) {
  const auto missing = std::find(started_.begin(), started_.end(), 0);
  MINIGPT_CHECK(missing == started_.end(),
                "finish(): gradient bucket {} was never started (backward without bucket_ready?)",
                missing - started_.begin());
  std::fill(started_.begin(), started_.end(), 0);
  if (timed_backward_end_ != nullptr) {
    record_timing(timed_backward_end_, compute);
    record_timing(timed_comm_end_, comm_stream_);
  }
  MINIGPT_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
  MINIGPT_CUDA_CHECK(cudaStreamWaitEvent(compute, done_, 0));
}

void DeviceGradReducer::enable_timing() {
  if (timed_backward_end_ != nullptr) return;
  MINIGPT_CUDA_CHECK(cudaEventCreate(&timed_backward_end_));
  MINIGPT_CUDA_CHECK(cudaEventCreate(&timed_comm_end_));
}

double DeviceGradReducer::exposed_ms() const {
  MINIGPT_CHECK(timed_backward_end_ != nullptr, "DeviceGradReducer: exposed_ms() without enable_timing()");
  float ms = 0.0f;
  MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&ms, timed_backward_end_, timed_comm_end_));
  return std::max(0.0, static_cast<double>(ms));  // negative: the all-reduces ended first
}

void DeviceGradReducer::reduce_all(cudaStream_t compute) {
  MINIGPT_CHECK(std::find(started_.begin(), started_.end(), 1) == started_.end(),
                "reduce_all(): buckets of this step were already started with bucket_ready");
  if (timed_backward_end_ != nullptr) record_timing(timed_backward_end_, compute);
  comm_.all_reduce_avg(grads_, count_, compute);
  if (timed_backward_end_ != nullptr) record_timing(timed_comm_end_, compute);
}

double DeviceGradReducer::time_alone_ms(int64_t runs) {
  MINIGPT_CHECK(runs > 0, "time_alone_ms: {} runs", runs);
  MINIGPT_CUDA_CHECK(cudaSetDevice(comm_.device()));
  float* scratch = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<double> ms;
  auto release_scratch = [&] {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (scratch != nullptr) cudaFree(scratch);
  };
  try {
    MINIGPT_CUDA_CHECK(cudaMalloc(&scratch, count_ * sizeof(float)));
    MINIGPT_CUDA_CHECK(cudaEventCreate(&start));
    MINIGPT_CUDA_CHECK(cudaEventCreate(&stop));
    const std::vector<float> ones(count_, 1.0f);  // averaged over ranks: stays 1
    MINIGPT_CUDA_CHECK(cudaMemcpy(scratch, ones.data(), count_ * sizeof(float), cudaMemcpyHostToDevice));
    MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's copy, before comm_stream_ reads it
    for (int64_t r = 0; r <= runs; ++r) {  // run 0 warms up
      comm_.barrier();
      MINIGPT_CUDA_CHECK(cudaEventRecord(start, comm_stream_));
      for (const FlatSpan& b : spans_) comm_.all_reduce_avg(scratch + b.offset, b.count, comm_stream_);
      MINIGPT_CUDA_CHECK(cudaEventRecord(stop, comm_stream_));
      comm_.synchronize(comm_stream_, "the bench's bucket all-reduces");
      float t = 0.0f;
      MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      if (r > 0) ms.push_back(t);
    }
  } catch (...) {
    release_scratch();
    throw;
  }
  release_scratch();
  return median(ms);
}

}  // namespace minigpt::dist
