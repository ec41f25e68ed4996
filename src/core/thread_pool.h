// ThreadPool: a fixed set of worker threads and a deterministic parallel_for.
//
// parallel_for(n, fn) splits [0, n) into one contiguous chunk per thread, always the same
// chunks for the same n and thread count, so results that depend on summation order are
// reproducible for a given `-t`. The calling thread runs chunk 0; a pool of one thread runs
// everything inline with no synchronisation. Not a work-stealing scheduler: the kernels here
// have uniform rows, and static chunks are what makes training bit-for-bit repeatable.
//
// Waiting is spin-then-sleep (as OpenMP runtimes do): a worker that finished a chunk polls for
// the next job for up to kSpinMicros before it blocks on a condition variable, and the caller
// polls for the workers' completion the same way. A training step issues ~150 parallel_for
// calls a few tens of microseconds apart; waking a sleeping thread through the kernel costs
// 5-50 us each on a virtual machine, which made the second thread worth only ~7%. The spin is
// bounded, so an idle pool (or one on an oversubscribed machine) goes back to sleeping.
// A job of fewer chunks than threads waits only for the workers that have a chunk: with 16
// threads, a softmax of 64 rows of 600 runs on 3, and the other 12 workers' acknowledgements
// (each an atomic on the caller's cache line, or a wake-up from sleep) stay off its critical path.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minigpt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads = 1);  // threads >= 1 (0 means hardware_concurrency)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks smaller than `grain`
  // items are merged so tiny loops stay on one thread. Exceptions from fn are rethrown here.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                    int64_t grain = 1);

  // How long a thread polls before it sleeps (a worker for the next job, the caller for
  // the workers to finish).
  static constexpr int64_t kSpinMicros = 200;

 private:
  void worker_loop(int index);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards the sleeping side: wake_/done_ waits and stop_
  std::condition_variable wake_;
  std::condition_variable done_;
  // The job, written by parallel_for before it publishes the job's word (release); a worker
  // reads it after seeing the new word (acquire), and only when it has a chunk: the caller
  // cannot start the next job before every worker with a chunk has finished this one.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  // generation << kChunkBits | chunks, in one word so that a worker without a chunk, which
  // the caller does not wait for, never reads a field the next job may be rewriting.
  static constexpr int kChunkBits = 16;
  std::atomic<uint64_t> job_word_{0};
  std::atomic<int> pending_{0};  // workers with a chunk that have not finished it
  bool stop_ = false;
  std::exception_ptr error_;  // first worker exception of the current job (under mutex_)
};

// The half-open range of chunk `index` when [0, n) is split into `chunks` contiguous parts.
inline void chunk_range(int64_t n, int chunks, int index, int64_t& begin, int64_t& end) {
  const int64_t base = n / chunks, extra = n % chunks;
  begin = index * base + (index < extra ? index : extra);
  end = begin + base + (index < extra ? 1 : 0);
}

}  // namespace minigpt
