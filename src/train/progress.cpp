#include "train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace minigpt {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

double process_peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0.0;
}

static std::string format_rate(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return fmt::format("{:.2f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}

ProgressDisplay::ProgressDisplay(std::FILE* out, bool terminal, int64_t first_step,
                                 int64_t total_steps, int64_t tokens_per_step, int64_t log_every)
    : out_(out), terminal_(terminal), first_step_(first_step), total_steps_(total_steps),
      tokens_per_step_(tokens_per_step), log_every_(std::max<int64_t>(log_every, 1)),
      current_(first_step) {}

double ProgressDisplay::tokens_per_second() const {
  const double t = step_seconds_;
  return t > 0.0 ? static_cast<double>(steps_done_ * tokens_per_step_) / t : 0.0;
}

void ProgressDisplay::step(const StepStats& s) {
  ++steps_done_;
  step_seconds_ += s.seconds;
  current_ = s.step + 1;
  last_ = s;
  loss_sum_ += s.loss;
  ++loss_count_;
  if (terminal_) {
    draw(current_ == total_steps_);
  } else if (current_ % log_every_ == 0 || current_ == total_steps_ || steps_done_ == 1) {
    draw(true);
  }
}

void ProgressDisplay::draw(bool force) {
  const double now = timer_.elapsed_s();
  if (!force && last_draw_s_ >= 0.0 && now - last_draw_s_ < 0.1) return;
  last_draw_s_ = now;
  if (loss_count_ > 0) shown_loss_ = static_cast<float>(loss_sum_ / static_cast<double>(loss_count_));
  loss_sum_ = 0.0;
  loss_count_ = 0;
  const double per_step = steps_done_ > 0 ? now / static_cast<double>(steps_done_) : 0.0;
  const double eta = per_step * static_cast<double>(total_steps_ - current_);
  const std::string rate = format_rate(tokens_per_second());
  if (terminal_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * current_ / std::max<int64_t>(total_steps_, 1));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    const std::string val = val_loss_ ? fmt::format("  val {:.3f}", *val_loss_) : "";
    fmt::print(out_, "\r[{}] {:>{}}/{}  loss {:.3f}{}  {} tok/s  ETA {}\x1b[K", bar, current_,
               std::to_string(total_steps_).size(), total_steps_, shown_loss_, val, rate,
               format_duration(eta));
    line_open_ = true;
  } else {
    fmt::print(out_, "step {}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3f}  {} tok/s  elapsed {}  ETA {}\n",
               current_, total_steps_, shown_loss_, last_.lr, last_.grad_norm, rate,
               format_duration(now), format_duration(eta));
  }
  std::fflush(out_);
}

void ProgressDisplay::clear_line() {
  if (line_open_) {
    fmt::print(out_, "\r\x1b[K");
    line_open_ = false;
  }
}

void ProgressDisplay::eval(int64_t step, float val_loss) {
  val_loss_ = val_loss;
  clear_line();
  fmt::print(out_, "eval  step {}/{}  val loss {:.4f}  (train loss {:.4f})\n", step, total_steps_,
             val_loss, shown_loss_ > 0.0f ? shown_loss_ : last_.loss);
  std::fflush(out_);
  if (terminal_) draw(true);
}

void ProgressDisplay::note(const std::string& text) {
  clear_line();
  fmt::print(out_, "{}\n", text);
  std::fflush(out_);
  if (terminal_ && steps_done_ > 0) draw(true);
}

void ProgressDisplay::finish() {
  if (terminal_ && line_open_) {
    fmt::print(out_, "\n");
    line_open_ = false;
  }
  std::fflush(out_);
}

}  // namespace minigpt
