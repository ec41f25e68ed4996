#include "train/cuda_data_parallel.h"

#include "core/error.h"

#if MINIGPT_HAVE_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace minigpt {

void connect_nccl(CudaTrainStep& step, dist::Communicator& comm) {
#if MINIGPT_HAVE_NCCL
  auto* nccl = dynamic_cast<dist::NcclCommunicator*>(&comm);
  MINIGPT_CHECK(nccl != nullptr, "train --device cuda over {} ranks reduces over NCCL: use --dist nccl, not --dist {}",
                comm.size(), comm.name());
  step.set_grad_hook([nccl](float* grads, int64_t floats, cudaStream_t stream) {
    nccl->all_reduce_avg(grads, static_cast<size_t>(floats), stream);
  });
  step.set_step_wait([nccl](cudaStream_t stream) {
    nccl->synchronize(stream, "a training step (its gradient all-reduce waits for every rank)");
  });
#else
  (void)step;
  MINIGPT_FAIL("--dist {}: this minigpt was built without NCCL; GPU ranks need the `cuda` preset with NCCL",
               comm.name());
#endif
}

}  // namespace minigpt
