#include "dist/nccl_host.h"

#include "core/error.h"
#include "core/timer.h"

#include <chrono>
#include <thread>

namespace minigpt::dist {

int device_for_rank(int local_rank, int device_count) {
  MINIGPT_CHECK(device_count > 0, "--dist nccl: no CUDA GPU is visible to this rank (local rank {})", local_rank);
  MINIGPT_CHECK(local_rank >= 0, "--dist nccl: local rank {} is negative", local_rank);
  return local_rank % device_count;
}

void wait_with_deadline(const std::function<bool()>& poll, const std::function<void()>& on_timeout,
                        const WaitContext& who, const std::string& what) {
  MINIGPT_CHECK(who.timeout_s > 0, "the collective timeout must be positive, got {} s", who.timeout_s);
  constexpr double kSpin_s = 5e-3;                        // poll back to back this long (a step),
  constexpr auto kNap = std::chrono::microseconds(20);  // then nap between polls
  Timer timer;
  while (!poll()) {
    const double waited = timer.elapsed_s();
    if (waited > who.timeout_s) {
      on_timeout();
      MINIGPT_FAIL("rank {} of {}: {} did not complete within {:g} s; a peer rank is dead, hung or never "
                   "joined (the NCCL communicator was aborted; raise --dist-timeout if a rank is just slow)",
                   who.rank, who.size, what, who.timeout_s);
    }
    if (waited > kSpin_s) std::this_thread::sleep_for(kNap);
  }
}

}  // namespace minigpt::dist
