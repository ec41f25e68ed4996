// Communicator: the collectives data-parallel training needs, behind one small interface so
// that the trainer never names an engine. Implementations: SingleProcess (world of one: every
// collective is a no-op, the default), MpiCommunicator (dist/mpi_communicator.h, Open MPI) and,
// built with CUDA, NcclCommunicator (dist/nccl_communicator.h: GPU buffers, bootstrapped
// through MPI; its host collectives go through MPI).
//
// Every collective must be called by every rank in the same order with the same sizes (the
// MPI rule). Waits are bounded: an implementation that can hang (MPI) gives up after its
// timeout, says which rank waited for what, and ends every rank (never waits forever).
//
// What it does not do: choose buckets or average gradients (dist/grad_buckets.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace minigpt::dist {

// A started all-reduce; wait() blocks (bounded) until the buffer holds the sum.
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  virtual bool test() = 0;  // true once complete; also drives the engine's progress
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool is_root() const { return rank() == 0; }
  virtual std::string name() const = 0;  // "single", "mpi", "nccl"

  // In place: data[0, n) becomes the element-wise sum over ranks (fp32).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // Non-blocking form: data must stay alive and untouched until wait() returns.
  virtual std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, size_t n) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank now (an error on one rank must not leave the others waiting), after
  // printing `why` to stderr. SingleProcess returns (the caller then throws as usual).
  virtual void abort(const std::string& why) = 0;
};

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce_sum(float*, size_t) override {}
  std::unique_ptr<PendingReduce> start_all_reduce_sum(float*, size_t) override;
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
};

// "single" -> SingleProcess; "mpi" -> MpiCommunicator (initialises MPI once per process);
// "nccl" -> NcclCommunicator over MPI (Error naming the cause in a build without NCCL or on a
// rank that sees no GPU). timeout_s bounds every wait. Error for another name.
std::unique_ptr<Communicator> make_communicator(const std::string& name, double timeout_s);

}  // namespace minigpt::dist
