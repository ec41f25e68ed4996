#include "dist/nccl_communicator.h"

#include "core/error.h"
#include "dist/mpi_communicator.h"
#include "kernels/cuda/cuda_check.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0),
              "NcclCommunicator needs NCCL >= 2.14 (non-blocking communicators, ncclAvg)");

namespace minigpt::dist {

namespace {

// The device this rank drives, current for the calls that follow (NCCL and the CUDA runtime
// act on the calling thread's current device).
void use_device(int device) { MINIGPT_CUDA_CHECK(cudaSetDevice(device)); }

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += fmt::format(" ({})", last);
  return text;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, int device, double timeout_s)
    : host_(std::move(host)), device_(device) {
  MINIGPT_CHECK(host_ != nullptr, "NcclCommunicator: no host communicator to bootstrap through");
  who_ = {host_->rank(), host_->size(), timeout_s};
  MINIGPT_CHECK(timeout_s > 0, "the collective timeout must be positive, got {} s", timeout_s);
  try {
    join();
  } catch (const std::exception& e) {
    // The ranks that did join must not wait for this one (nor hang finalising MPI): end them
    // all through the host (MPI_Abort; a world of one, or a test's host, returns and we throw).
    abort_nccl();
    if (who_.size > 1) host_->abort(e.what());
    throw;
  }
}

void NcclCommunicator::join() {
  use_device(device_);
  // Connect every peer at initialisation (NCCL >= 2.22 connects lazily at the first collective
  // of a kind by default): the trainer's first all-reduce is inside a CUDA graph capture, where
  // setting up connections is best avoided. A value the user set is kept.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  // NVLink multicast (NVLS) off unless asked for: on shared H200 hosts a program using it can put
  // the GPUs out of service (.library/device/KINDS.md), and a ring all-reduce serves DDP here.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId id{};
  if (host_->is_root()) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    MINIGPT_CHECK(r == ncclSuccess, "rank 0: ncclGetUniqueId failed: {}", nccl_message(r, nullptr));
  }
  host_->broadcast(&id, sizeof id, 0);  // bounded by the host communicator (MPI: --dist-timeout)

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every NCCL call returns at once; this class bounds the waits
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, who_.size, id, who_.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    MINIGPT_FAIL("rank {} of {}: ncclCommInitRankConfig on CUDA device {} failed: {}", who_.rank, who_.size,
                 device_, nccl_message(r, comm_));
  const std::string what = fmt::format("joining the NCCL communicator (CUDA device {})", device_);
  wait_with_deadline([&] { return ready(what); }, [&] { abort_nccl(); }, who_, what);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  try {
    use_device(device_);
    check(ncclCommFinalize(comm_), "ncclCommFinalize");  // flushes the enqueued work, bounded
    ncclCommDestroy(comm_);
    comm_ = nullptr;
  } catch (const std::exception& e) {  // a destructor must not throw: say why, free what is left
    std::fprintf(stderr, "minigpt: rank %d: closing the NCCL communicator: %s\n", who_.rank, e.what());
    abort_nccl();
  }
}

void NcclCommunicator::abort_nccl() noexcept {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);  // releases kernels and threads waiting on peers; frees the communicator
  comm_ = nullptr;
}

void NcclCommunicator::abort(const std::string& why) {
  abort_nccl();
  host_->abort(why);
}

bool NcclCommunicator::ready(const std::string& what) {
  MINIGPT_CHECK(comm_ != nullptr, "rank {}: {}: the NCCL communicator was aborted", who_.rank, what);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r == ncclSuccess && state == ncclInProgress) return false;
  if (r == ncclSuccess && state == ncclSuccess) return true;
  const std::string why = nccl_message(r != ncclSuccess ? r : state, comm_);
  abort_nccl();
  MINIGPT_FAIL("rank {} of {}: {} failed: NCCL reports '{}'; the NCCL communicator was aborted",
               who_.rank, who_.size, what, why);
}

void NcclCommunicator::check(ncclResult_t result, const char* call) {
  if (result == ncclInProgress) {  // non-blocking mode: the call finishes in the background
    wait_with_deadline([&] { return ready(call); }, [&] { abort_nccl(); }, who_, call);
    return;
  }
  if (result == ncclSuccess) return;
  const std::string why = nccl_message(result, comm_);
  MINIGPT_FAIL("rank {} of {}: {} failed: {}", who_.rank, who_.size, call, why);
}

void NcclCommunicator::all_reduce_avg(float* device_data, size_t n, cudaStream_t stream) {
  MINIGPT_CHECK(comm_ != nullptr, "rank {}: all-reduce on an aborted NCCL communicator", who_.rank);
  if (n == 0) return;
  check(ncclAllReduce(device_data, device_data, n, ncclFloat32, ncclAvg, comm_, stream), "ncclAllReduce");
}

void NcclCommunicator::broadcast_device(void* device_data, size_t bytes, int root, cudaStream_t stream) {
  MINIGPT_CHECK(comm_ != nullptr, "rank {}: broadcast on an aborted NCCL communicator", who_.rank);
  MINIGPT_CHECK(root >= 0 && root < who_.size, "broadcast from rank {} of {}", root, who_.size);
  if (bytes == 0) return;
  check(ncclBroadcast(device_data, device_data, bytes, ncclUint8, root, comm_, stream), "ncclBroadcast");
}

void NcclCommunicator::synchronize(cudaStream_t stream, const std::string& what) {
  auto done = [&] {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) cuda::throw_cuda_error(status, "cudaStreamQuery", __FILE__, __LINE__);
    ready(what);  // throws at once on an asynchronous NCCL error (or an aborted communicator)
    return false;
  };
  wait_with_deadline(done, [&] { abort_nccl(); }, who_, what);
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(double timeout_s) {
  auto mpi = std::make_unique<MpiCommunicator>(timeout_s);
  int device = 0;
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear it: the Error below says what happened
      MINIGPT_FAIL("--dist nccl: rank {} of {} sees no CUDA GPU ({})", mpi->rank(), mpi->size(),
                   cudaGetErrorString(status));
    }
    device = device_for_rank(mpi->local_rank(), count);
  } catch (const std::exception& e) {
    if (mpi->size() > 1) mpi->abort(e.what());  // the other ranks would wait for this one
    throw;
  }
  return std::make_unique<NcclCommunicator>(std::move(mpi), device, timeout_s);
}

}  // namespace minigpt::dist
