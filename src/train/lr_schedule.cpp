#include "train/lr_schedule.h"

#include "core/error.h"

#include <cmath>
#include <numbers>

namespace minigpt {

void LrSchedule::validate() const {
  MINIGPT_CHECK(std::isfinite(max_lr) && max_lr > 0.0f, "lr must be positive, got {}", max_lr);
  MINIGPT_CHECK(std::isfinite(min_lr) && min_lr >= 0.0f && min_lr <= max_lr,
                "min lr must be in [0, lr = {}], got {}", max_lr, min_lr);
  MINIGPT_CHECK(warmup_steps >= 0, "warm-up steps must be >= 0, got {}", warmup_steps);
  MINIGPT_CHECK(total_steps >= 1, "total steps must be >= 1, got {}", total_steps);
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps)
    return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (step >= total_steps) return min_lr;
  // Computed in double: the same lr on every platform for a given step.
  const double p = static_cast<double>(step - warmup_steps) /
                   static_cast<double>(total_steps - warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return static_cast<float>(min_lr + (static_cast<double>(max_lr) - min_lr) * cosine);
}

}  // namespace minigpt
