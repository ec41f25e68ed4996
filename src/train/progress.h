// ProgressDisplay: what `minigpt train` prints while it runs.
//
// On a terminal (the caller decides, with isatty): one line redrawn in place at most ten times
// a second,
//   [########............]  1234/6000  loss 1.234  val 1.301  52.1k tok/s  ETA 1:32
// Otherwise (a log file, a pipe, CI): one plain line every `log_every` steps and after the last,
//   step 1234/6000  loss 1.234  lr 1.8e-03  |g| 0.412  52.1k tok/s  elapsed 0:23  ETA 1:32
// "loss" is the mean training loss of the steps since the previous line (one step's loss is
// noisy); evaluations and notes always get their own line. Throughput is the training steps'
// tokens over their own time (StepStats::seconds) since the display started: evaluations and
// checkpoints do not dilute it (the ETA, from wall time, does include them).
#pragma once

#include "core/timer.h"
#include "train/trainer.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace minigpt {

std::string format_duration(double seconds);  // "0:07", "12:34", "1:02:03"

// Peak resident memory of this process in MiB: VmHWM from /proc/self/status (0 where /proc is
// absent). Not getrusage's ru_maxrss, which Linux carries across execve, so a child of a large
// Python process would report its parent's peak.
double process_peak_rss_mib();

class ProgressDisplay {
 public:
  ProgressDisplay(std::FILE* out, bool terminal, int64_t first_step, int64_t total_steps,
                  int64_t tokens_per_step, int64_t log_every);

  void step(const StepStats& s);
  void eval(int64_t step, float val_loss);
  void note(const std::string& text);  // a line of its own (checkpoints, warnings)
  void finish();                        // ends the in-place line on a terminal

  double tokens_per_second() const;
  double elapsed_s() const { return timer_.elapsed_s(); }

 private:
  void draw(bool force);
  void clear_line();

  std::FILE* out_;
  bool terminal_;
  int64_t first_step_, total_steps_, tokens_per_step_, log_every_;
  Timer timer_;
  double last_draw_s_ = -1.0;
  int64_t steps_done_ = 0;   // since the display started
  double step_seconds_ = 0.0;  // sum of StepStats::seconds since the display started
  int64_t current_ = 0;      // updates done in total
  double loss_sum_ = 0.0;    // since the last plain line / redraw window
  int64_t loss_count_ = 0;
  float shown_loss_ = 0.0f;
  StepStats last_;
  std::optional<float> val_loss_;
  bool line_open_ = false;
};

}  // namespace minigpt
