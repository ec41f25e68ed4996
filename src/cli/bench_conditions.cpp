// Load average and CPU share of a benchmark's timed runs. See bench_conditions.h.
#include "cli/bench_conditions.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include <time.h>

namespace minigpt::cli {

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "";
  return a + " " + b + " " + c;
}

double process_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

CpuShare::CpuShare(int threads) : threads_(threads), cpu0_(process_cpu_s()) {}

double CpuShare::share() const {
  const double wall = wall_.elapsed_s();
  return wall > 0 ? (process_cpu_s() - cpu0_) / (threads_ * wall) : 0.0;
}

void report_conditions(Report& report, const std::string& load_at_start, double cpu_share, const std::string& what) {
  report.set_meta("loadavg_at_start", load_at_start);
  report.set_meta("loadavg_at_end", loadavg());
  report.set_meta("cpu_share", std::round(cpu_share * 1000.0) / 1000.0);
  std::string note = fmt::format("cpu_share {:.2f}: CPU time of this process over threads x wall time during {} "
                                 "(1.0: every thread held its core throughout).", cpu_share, what);
  if (cpu_share < 0.9)
    note += " Below 0.9: other processes held our cores part of the time. A one-thread median mostly survives "
            "that; a multi-threaded one does not (every op waits for its slowest thread), so its times are the "
            "load's, not the code's: measure again on a quiet machine.";
  report.add_note(note);
}

}  // namespace minigpt::cli
