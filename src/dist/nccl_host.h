// The NCCL communicator's host-only logic, built in every configuration (with or without CUDA)
// so that tests/dist_test.cpp covers it on machines without a GPU:
//   - which GPU a rank drives (device_for_rank), and
//   - the bounded wait every NCCL wait goes through (wait_with_deadline): poll until done, and
//     past the deadline abort the engine and throw an Error naming the rank and the timeout.
//
// What it does not do: call CUDA or NCCL (dist/nccl_communicator.cpp passes the polls in).
#pragma once

#include <functional>
#include <string>

namespace minigpt::dist {

// The CUDA device of a rank: local_rank % device_count (one process per GPU on each host; with
// CUDA_VISIBLE_DEVICES narrowed to one GPU per rank every rank drives its device 0). Error if
// no device is visible or local_rank is negative. Two ranks on one GPU are refused by NCCL
// itself ("Duplicate GPU detected"), which NcclCommunicator reports with this rank's device.
int device_for_rank(int local_rank, int device_count);

// Who waits, for the messages.
struct WaitContext {
  int rank = 0;
  int size = 1;
  double timeout_s = 30.0;  // --dist-timeout
};

// Calls poll() until it returns true (done). poll() throws Error when the engine reports a
// failure. When timeout_s passes first: calls on_timeout() once (ncclCommAbort: the engine
// releases every kernel and thread stuck on a peer), then throws
//   Error("rank R of N: WHAT did not complete within S s; a peer rank is dead, hung or never
//          joined (the NCCL communicator was aborted)").
// Sleeps between polls (a short spin first: the usual wait is a step's last microseconds).
void wait_with_deadline(const std::function<bool()>& poll, const std::function<void()>& on_timeout,
                        const WaitContext& who, const std::string& what);

}  // namespace minigpt::dist
