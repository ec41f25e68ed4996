// NcclCommunicator: data-parallel collectives on GPU buffers over NCCL, one process per GPU,
// bootstrapped through a host communicator (MPI under mpirun). Built only with CUDA and NCCL
// (MINIGPT_HAVE_NCCL); `--dist nccl` elsewhere is an Error saying why (dist/communicator.cpp).
//
// Bootstrap: rank 0 calls ncclGetUniqueId and broadcasts the id over the host communicator;
// every rank selects its device (dist/nccl_host.h: local rank % visible devices) and joins with
// ncclCommInitRankConfig in NCCL's non-blocking mode (config.blocking = 0).
//
// Collectives on the device are only enqueued on the caller's stream (all_reduce_avg,
// broadcast_device), so they can be captured in a CUDA graph. What that relies on: NCCL >= 2.9
// captures collectives (one GPU per process, as here); every rank captures the same collectives
// and launches the graph as often; no connection is set up while capturing (NCCL >= 2.22
// connects lazily at the first collective of a kind: the constructor sets NCCL_RUNTIME_CONNECT=0
// unless the user set it, so every peer is connected at initialisation).
// In non-blocking mode an NCCL call may return ncclInProgress before the work is on the stream;
// each call here then waits (bounded) until the communicator is ready again, so a return from
// all_reduce_avg means "enqueued" - also inside a capture, where that wait is host polling only.
//
// Waits are bounded (dist/nccl_host.h's wait_with_deadline, timeout = --dist-timeout): joining
// the communicator, finishing an enqueue, and synchronize(stream), which replaces
// cudaStreamSynchronize for any stream that carries collectives. Past the timeout the rank
// calls ncclCommAbort (which releases NCCL kernels spinning on a dead peer) and throws an Error
// naming the rank and the timeout; the CLI then calls abort(), which ends every rank through
// the host communicator (MPI_Abort). An asynchronous NCCL error (a peer's connection lost) is
// reported the same way as soon as a wait sees it.
//
// Host collectives (the loss for the log, barriers, host weights before they are uploaded) go
// through the host communicator, so the CPU trainer's loop code works unchanged.
//
// What it does not do: choose buckets or overlap them with the backward
// (dist/device_grad_reducer.h), or start the ranks (mpirun or python/minigpt/mpi_launch.py).
#pragma once

#include "dist/communicator.h"
#include "dist/nccl_host.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

namespace minigpt::dist {

class NcclCommunicator final : public Communicator {
 public:
  // host: carries the unique id and the host collectives; its rank and size are this
  // communicator's. device: the CUDA device this rank drives (device_for_rank). Returns when
  // every rank has joined; past timeout_s, or on an NCCL error, ends every rank through
  // host->abort (a host that returns from abort, as a world of one: the Error is thrown).
  NcclCommunicator(std::unique_ptr<Communicator> host, int device, double timeout_s);
  ~NcclCommunicator() override;  // finalises and destroys the NCCL communicator (bounded)
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return "nccl"; }
  int device() const { return device_; }
  double timeout_s() const { return who_.timeout_s; }

  // Host buffers, through the host communicator.
  void all_reduce_sum(float* data, size_t n) override { host_->all_reduce_sum(data, n); }
  std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, size_t n) override {
    return host_->start_all_reduce_sum(data, n);
  }
  void broadcast(void* data, size_t bytes, int root) override { host_->broadcast(data, bytes, root); }
  void barrier() override { host_->barrier(); }
  // Aborts the NCCL communicator, then ends every rank through the host communicator.
  void abort(const std::string& why) override;

  // Device buffers, enqueued on `stream` (capturable). In place: device_data[0, n) becomes the
  // mean over ranks (ncclAvg: for fp32, NCCL scales each input by 1/N and sums; at N = 2 that
  // equals (a + b) / 2 exactly, the CPU path's sum * (1/N)).
  void all_reduce_avg(float* device_data, size_t n, cudaStream_t stream);
  void broadcast_device(void* device_data, size_t bytes, int root, cudaStream_t stream);
  // Bounded wait for everything enqueued on `stream` so far (instead of cudaStreamSynchronize).
  void synchronize(cudaStream_t stream, const std::string& what);

 private:
  void join();  // the bootstrap: unique id over the host, then ncclCommInitRankConfig (bounded)
  void check(ncclResult_t result, const char* call);  // throws; ncclInProgress: waits until ready
  bool ready(const std::string& what);                  // poll: comm no longer in progress
  void abort_nccl() noexcept;

  std::unique_ptr<Communicator> host_;
  int device_;
  WaitContext who_;
  ncclComm_t comm_ = nullptr;
};

// Under mpirun: an MpiCommunicator as the host, the device from the rank's local rank (one
// process per GPU on each host). Error if no GPU is visible.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(double timeout_s);

}  // namespace minigpt::dist
