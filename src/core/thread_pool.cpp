#include "core/thread_pool.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace minigpt {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls done() for up to ThreadPool::kSpinMicros; true when it became true meanwhile.
template <class Done>
bool spin_until(Done done) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {  // ~64 pauses (a few microseconds) between clock reads
      if (done()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  MINIGPT_CHECK(threads >= 1 && threads <= 1024, "thread count must be in [1, 1024], got {}", threads);
  threads_ = threads;
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new job: poll first, then sleep. The word is published under the mutex, so
    // a worker that checks it under the mutex before sleeping cannot miss it.
    if (!spin_until([&] { return job_word_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || job_word_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    seen = job_word_.load(std::memory_order_acquire);
    const int chunks = static_cast<int>(seen & ((uint64_t{1} << kChunkBits) - 1));
    if (index >= chunks) continue;  // a small job: the caller waits only for workers with a chunk
    int64_t begin, end;
    chunk_range(job_n_, chunks, index, begin, end);
    try {
      (*job_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);  // the caller may be about to sleep on done_
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    error_ = nullptr;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    const uint64_t generation = (job_word_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
    job_word_.store(generation << kChunkBits | static_cast<uint64_t>(chunks), std::memory_order_release);
  }
  wake_.notify_all();  // no system call when every worker is still polling
  std::exception_ptr error;
  int64_t begin, end;
  chunk_range(n, chunks, 0, begin, end);
  try {
    fn(begin, end);
  } catch (...) {
    error = std::current_exception();
  }
  const auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  std::unique_lock lock(mutex_, std::defer_lock);
  if (!spin_until(finished)) {
    lock.lock();
    done_.wait(lock, finished);
  } else {
    lock.lock();  // error_ is read under the mutex
  }
  job_ = nullptr;
  if (!error) error = error_;
  if (error) std::rethrow_exception(error);
}

}  // namespace minigpt
