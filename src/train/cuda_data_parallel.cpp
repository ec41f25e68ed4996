#include "train/cuda_data_parallel.h"

#include "core/error.h"

#include <utility>
#include <vector>

#if MINIGPT_HAVE_NCCL
#include "dist/device_grad_reducer.h"
#include "dist/grad_layout.h"
#include "dist/nccl_communicator.h"
#endif

namespace minigpt {

#if MINIGPT_HAVE_NCCL

struct CudaDataParallel::Impl {
  Impl(GradSync m, dist::NcclCommunicator& comm, float* grads, size_t count, std::vector<dist::FlatSpan> spans)
      : mode(m), reducer(comm, grads, count, std::move(spans)) {}
  GradSync mode;
  dist::DeviceGradReducer reducer;
};

namespace {

dist::NcclCommunicator& nccl_of(dist::Communicator& comm) {
  auto* nccl = dynamic_cast<dist::NcclCommunicator*>(&comm);
  MINIGPT_CHECK(nccl != nullptr, "train --device cuda over {} ranks reduces over NCCL: use --dist nccl, not --dist {}",
                comm.size(), comm.name());
  return *nccl;
}

// The model's L + 2 buckets over the step's flat gradient buffer (its arena slots), or one.
std::vector<dist::FlatSpan> spans_for(const CudaTrainStep& step, const ModelConfig& config, GradSync mode) {
  if (mode == GradSync::kAfterBackward) return {};
  std::vector<size_t> offsets;
  for (const auto& [name, offset] : step.parameter_offsets()) offsets.push_back(static_cast<size_t>(offset));
  return dist::grad_buckets_at(config, offsets);
}

}  // namespace

CudaDataParallel::CudaDataParallel(CudaTrainStep& step, dist::Communicator& comm, GradSync mode) {
  dist::NcclCommunicator& nccl = nccl_of(comm);
  const ModelConfig& config = step.config();
  impl_ = std::make_unique<Impl>(mode, nccl, step.grad_buffer(), static_cast<size_t>(step.flat_floats()),
                                 spans_for(step, config, mode));
  impl_->reducer.enable_timing();
  dist::DeviceGradReducer* reducer = &impl_->reducer;
  if (mode == GradSync::kOverlapped) {
    const int n_layer = config.n_layer;
    step.set_stage_hook([reducer, n_layer](int stage, cudaStream_t stream) {
      reducer->bucket_ready(dist::grad_bucket_index(stage, n_layer), stream);
    });
    step.set_grad_hook([reducer](float*, int64_t, cudaStream_t stream) { reducer->finish(stream); });
  } else {
    step.set_grad_hook([reducer](float*, int64_t, cudaStream_t stream) { reducer->reduce_all(stream); });
  }
  dist::NcclCommunicator* wait_on = &nccl;
  step.set_step_wait([wait_on](cudaStream_t stream) {
    wait_on->synchronize(stream, "a training step (its gradient all-reduces wait for every rank)");
  });
}

CudaDataParallel::~CudaDataParallel() = default;
GradSync CudaDataParallel::mode() const { return impl_->mode; }
size_t CudaDataParallel::buckets() const { return impl_->reducer.buckets().size(); }
double CudaDataParallel::exposed_ms() const { return impl_->reducer.exposed_ms(); }
double CudaDataParallel::alone_ms(int64_t runs) { return impl_->reducer.time_alone_ms(runs); }

#else  // built without NCCL

struct CudaDataParallel::Impl {};

CudaDataParallel::CudaDataParallel(CudaTrainStep&, dist::Communicator& comm, GradSync) {
  MINIGPT_FAIL("--dist {}: this minigpt was built without NCCL; GPU ranks need the `cuda` preset with NCCL",
               comm.name());
}
CudaDataParallel::~CudaDataParallel() = default;
GradSync CudaDataParallel::mode() const { return GradSync::kOverlapped; }
size_t CudaDataParallel::buckets() const { return 0; }
double CudaDataParallel::exposed_ms() const { return 0.0; }
double CudaDataParallel::alone_ms(int64_t) { return 0.0; }

#endif

}  // namespace minigpt
