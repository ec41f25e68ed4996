#include "dist/mpi_communicator.h"

#include "core/error.h"
#include "core/timer.h"

#include <fmt/format.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

namespace minigpt::dist {

namespace {

constexpr int kHeartbeatTag = 7001;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  MINIGPT_FAIL("MPI: {} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}

class MpiPending final : public PendingReduce {
 public:
  MpiPending(MpiCommunicator& comm, MPI_Request request) : comm_(comm), request_(request) {}
  ~MpiPending() override {
    // A pending reduce dropped unwaited (an exception unwinding) must not leave MPI writing
    // into freed memory: wait for it (bounded).
    if (!done_) comm_.wait_bounded(&request_, "an abandoned all-reduce");
  }
  bool test() override {
    if (!done_) {
      int flag = 0;
      check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      done_ = flag != 0;
    }
    return done_;
  }
  void wait() override {
    // Always through wait_bounded (a completed request is MPI_REQUEST_NULL and returns at
    // once), so every rank counts the same waits and the heartbeats stay comparable.
    comm_.wait_bounded(&request_, "a gradient all-reduce");
    done_ = true;
  }

 private:
  MpiCommunicator& comm_;
  MPI_Request request_;
  bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
  MINIGPT_CHECK(timeout_s > 0, "the collective timeout must be positive, got {} s", timeout_s);
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // Open MPI's non-blocking all-reduce (coll/libnbc) takes, below 4 ranks or for an in-place
    // buffer (every bucket here), a binomial tree: rank 1 sends its whole bucket to rank 0,
    // which alone adds it and sends the sum back. The ring splits the bucket into N pieces:
    // each rank adds 1/N of it and sends 2 (N-1)/N of it (the planner's wire bytes), half the
    // binomial's bytes at N = 2 and the adds shared. At N = 2 both give the same sums bit for
    // bit (one float addition per element, which commutes). A user's setting wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
  }
  // Errors return codes (turned into Error by check_mpi) instead of aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  peer_seq_.assign(static_cast<size_t>(size_), 0);
  peer_heard_s_.assign(static_cast<size_t>(size_), 0.0);
}

MpiCommunicator::~MpiCommunicator() {
  if (!owns_mpi_) return;
  for (auto& h : sent_) MPI_Waitall(static_cast<int>(h.requests.size()), h.requests.data(), MPI_STATUSES_IGNORE);
  drain_heartbeats();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiCommunicator::local_rank() const {
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    MINIGPT_CHECK(*end == '\0' && value >= 0 && value < size_, "OMPI_COMM_WORLD_LOCAL_RANK='{}' is not a local rank",
                  env);
    return static_cast<int>(value);
  }
  MPI_Comm host;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
            "MPI_Comm_split_type");
  int local = 0;
  MPI_Comm_rank(host, &local);
  MPI_Comm_free(&host);
  return local;
}

void MpiCommunicator::send_heartbeats(uint64_t seq) {
  while (!sent_.empty()) {  // free the buffers of heartbeats already delivered
    int flag = 0;
    MPI_Testall(static_cast<int>(sent_.front().requests.size()), sent_.front().requests.data(), &flag,
                MPI_STATUSES_IGNORE);
    if (!flag) break;
    sent_.pop_front();
  }
  Heartbeat h{std::make_unique<uint64_t>(seq), {}};
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    h.requests.emplace_back();
    check_mpi(MPI_Isend(h.seq.get(), 1, MPI_UINT64_T, peer, kHeartbeatTag, MPI_COMM_WORLD,
                        &h.requests.back()),
              "MPI_Isend (heartbeat)");
  }
  sent_.push_back(std::move(h));
}

void MpiCommunicator::drain_heartbeats() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, MPI_COMM_WORLD, &flag, &status);
    if (!flag) return;
    uint64_t seq = 0;
    MPI_Recv(&seq, 1, MPI_UINT64_T, status.MPI_SOURCE, kHeartbeatTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const auto peer = static_cast<size_t>(status.MPI_SOURCE);
    if (seq > peer_seq_[peer]) peer_seq_[peer] = seq;
    peer_heard_s_[peer] = clock_.elapsed_s();
  }
}

std::string MpiCommunicator::laggards(uint64_t seq) {
  drain_heartbeats();
  const double now = clock_.elapsed_s();
  std::string names;
  for (int peer = 0; peer < size_; ++peer) {
    const auto p = static_cast<size_t>(peer);
    if (peer == rank_) continue;
    const double silent = now - peer_heard_s_[p];
    if (peer_seq_[p] < seq)
      names += fmt::format("{}rank {} never reached it", names.empty() ? "" : ", ", peer);
    else if (silent > 4 * kHeartbeatEvery_s)
      names += fmt::format("{}rank {} reached it but has been silent for {:.1f} s", names.empty() ? "" : ", ",
                           peer, silent);
  }
  return names;
}

void MpiCommunicator::wait_bounded(MPI_Request* request, const char* what) {
  const uint64_t seq = ++seq_;
  send_heartbeats(seq);
  Timer timer, since_heartbeat;
  for (;;) {
    int flag = 0;
    check_mpi(MPI_Test(request, &flag, MPI_STATUS_IGNORE), what);
    if (flag) break;
    drain_heartbeats();
    if (since_heartbeat.elapsed_s() > kHeartbeatEvery_s) {  // "still alive, still waiting"
      send_heartbeats(seq);
      since_heartbeat.reset();
    }
    if (timer.elapsed_s() > timeout_s_) {
      const std::string late = laggards(seq);
      std::fprintf(stderr,
                   "minigpt: rank %d of %d: %s (collective #%llu) did not complete within %g s; "
                   "%s; aborting every rank\n",
                   rank_, size_, what, static_cast<unsigned long long>(seq), timeout_s_,
                   late.empty() ? "every peer is alive and waiting too (an engine fault?)"
                                : fmt::format("{} (dead or hung)", late).c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  drain_heartbeats();
}

void MpiCommunicator::all_reduce_sum(float* data, size_t n) {
  start_all_reduce_sum(data, n)->wait();
}

std::unique_ptr<PendingReduce> MpiCommunicator::start_all_reduce_sum(float* data, size_t n) {
  MINIGPT_CHECK(n <= static_cast<size_t>(INT_MAX), "all-reduce of {} floats exceeds MPI's int count", n);
  MPI_Request request;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &request),
            "MPI_Iallreduce");
  return std::make_unique<MpiPending>(*this, request);
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  MINIGPT_CHECK(bytes <= static_cast<size_t>(INT_MAX), "broadcast of {} bytes exceeds MPI's int count", bytes);
  MPI_Request request;
  check_mpi(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  wait_bounded(&request, "a broadcast");
}

void MpiCommunicator::barrier() {
  MPI_Request request;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  wait_bounded(&request, "a barrier");
}

}  // namespace minigpt::dist

namespace minigpt::dist {

void MpiCommunicator::abort(const std::string& why) {
  std::fprintf(stderr, "minigpt: rank %d of %d: %s; aborting every rank\n", rank_, size_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace minigpt::dist
