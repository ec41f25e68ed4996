// MpiCommunicator: Communicator over MPI_COMM_WORLD (Open MPI from Debian), one process per
// rank, started by mpirun.
//
// Collectives are the non-blocking MPI ones (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) waited
// on by polling MPI_Test, so every wait has a deadline: past timeout_s, the waiting rank
// prints "rank R: <what> did not complete within S s; rank P never reached it (dead or hung)"
// and calls MPI_Abort, which ends every rank with a non-zero status. Which peers are to blame
// is known from heartbeats: a waiting rank sends the wait's sequence number to every peer on
// entry and every kHeartbeatEvery_s while it waits, so the rank that times out names the
// peers whose latest number is behind its own, or that reached the wait but went silent (a
// process stopped inside it). A rank that dies outright (SIGKILL) is reported by mpirun
// itself, which then ends the others.
//
// Open MPI progresses non-blocking collectives only inside MPI calls, so a caller that wants
// overlap calls test() on its pending reduces now and then (dist/grad_buckets.cpp does, after
// each layer of the backward).
#pragma once

#include "core/timer.h"
#include "dist/communicator.h"

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <vector>

namespace minigpt::dist {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s);  // MPI_Init_thread if not yet initialised
  ~MpiCommunicator() override;                 // MPI_Finalize if this object initialised it

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // This rank's index among the ranks on its host (0 .. ranks on the host - 1): which GPU it
  // drives. From Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, else MPI_Comm_split_type (collective).
  int local_rank() const;
  std::string name() const override { return "mpi"; }
  void all_reduce_sum(float* data, size_t n) override;
  std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, size_t n) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(const std::string& why) override;

  // Polls *request until complete or timeout (then aborts every rank, naming the laggards).
  // `what` names the operation in the message. Public for the pending-reduce objects.
  void wait_bounded(MPI_Request* request, const char* what);

 private:
  void send_heartbeats(uint64_t seq);
  std::string laggards(uint64_t seq);  // peers whose latest heartbeat is below seq

  int rank_ = 0, size_ = 1;
  double timeout_s_;
  bool owns_mpi_ = false;
  static constexpr double kHeartbeatEvery_s = 0.25;
  uint64_t seq_ = 0;                      // waits so far on this rank
  std::vector<uint64_t> peer_seq_;        // latest heartbeat seen from each peer
  std::vector<double> peer_heard_s_;      // when (clock_) each peer's last heartbeat arrived
  Timer clock_;
  struct Heartbeat {
    std::unique_ptr<uint64_t> seq;  // the send buffer, alive until the sends complete
    std::vector<MPI_Request> requests;
  };
  std::deque<Heartbeat> sent_;
  void drain_heartbeats();  // receives every heartbeat that has arrived
};

}  // namespace minigpt::dist
