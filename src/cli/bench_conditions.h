// The conditions a CPU benchmark ran under, for its report: the load average, and how much of
// the wall time our threads actually held a core (cpu_share). A forward at -t 2 issues a
// parallel_for per op and waits for both chunks, so one other runnable thread on either core
// stretches every op to that thread's time slice: measured on the 2-core machine with other
// builds running, `minigpt bench model -t 2` alone took 820-860 us against 210 us at -t 1.
// A figure taken with cpu_share well below 1 is a figure of the load, not of the code.
// This file measures nothing by itself and prints nothing.
#pragma once

#include "core/report.h"
#include "core/timer.h"

#include <string>

namespace minigpt::cli {

// "/proc/loadavg"'s first three fields ("0.52 0.61 0.40"), or "" where it cannot be read.
std::string loadavg();

// CPU time of every thread of this process so far (CLOCK_PROCESS_CPUTIME_ID), in seconds.
double process_cpu_s();

// Times a stretch of timed runs: CPU time of the process over (threads x wall time).
class CpuShare {
 public:
  explicit CpuShare(int threads);
  double share() const;  // since construction; 1.0: every thread held its core all along

 private:
  int threads_;
  double cpu0_;
  Timer wall_;
};

// Sets meta "loadavg_at_start"/"cpu_share" and adds a note explaining them (and warning when
// the share is below 0.9). `what` names the timed runs ("the timed forward runs").
void report_conditions(Report& report, const std::string& load_at_start, double cpu_share, const std::string& what);

}  // namespace minigpt::cli
