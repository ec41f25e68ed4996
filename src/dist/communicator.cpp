// SingleProcess's pending reduce and the communicator factory.
#include "dist/communicator.h"

#include "core/error.h"
#include "dist/mpi_communicator.h"
#if MINIGPT_HAVE_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace minigpt::dist {

namespace {
struct Done final : PendingReduce {
  bool test() override { return true; }
  void wait() override {}
};
}  // namespace

std::unique_ptr<PendingReduce> SingleProcess::start_all_reduce_sum(float*, size_t) {
  return std::make_unique<Done>();
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, double timeout_s) {
  if (name == "single" || name.empty()) return std::make_unique<SingleProcess>();
  if (name == "mpi") return std::make_unique<MpiCommunicator>(timeout_s);
  if (name == "nccl") {
#if MINIGPT_HAVE_NCCL
    return make_nccl_communicator(timeout_s);
#else
    MINIGPT_FAIL("--dist nccl: this minigpt was built without NCCL (MINIGPT_CUDA or MINIGPT_NCCL off at "
                 "configure time); build the `cuda` preset on a machine with the CUDA toolkit and NCCL, or "
                 "use --dist mpi on the CPU");
#endif
  }
  MINIGPT_FAIL("--dist '{}': expected single, mpi or nccl", name);
}

}  // namespace minigpt::dist
