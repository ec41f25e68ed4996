// The learning-rate schedule: linear warm-up, then cosine decay to a floor.
//
//   step < warmup:            lr = max_lr * (step + 1) / warmup
//   warmup <= step < total:   lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2,
//                             p = (step - warmup) / (total - warmup)  in [0, 1)
//   step >= total:            lr = min_lr
// `step` is 0-based: the lr used by the update of step `step`. Pure function of its inputs,
// so a resumed run recomputes exactly the lr of an uninterrupted one.
#pragma once

#include <cstdint>

namespace minigpt {

struct LrSchedule {
  float max_lr = 3e-3f;
  float min_lr = 3e-4f;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;

  void validate() const;  // Error naming the bad field
  float at(int64_t step) const;
};

}  // namespace minigpt
