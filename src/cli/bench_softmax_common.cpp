// What both device paths of `minigpt bench softmax` share: the peer scripts' JSON answers
// (run_json) and the input generator (fill_uniform). See bench_softmax.h.
#include "cli/bench_softmax.h"

#include <fmt/format.h>

#include <cstdio>

namespace minigpt::cli {

std::optional<nlohmann::json> run_json(const std::string& cmd, const std::string& what, Report& report) {
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    report.add_note(fmt::format("{}: could not start '{}'", what, cmd));
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  const int status = ::pclose(pipe);
  if (status != 0) {
    report.add_note(fmt::format("{}: '{}' failed (status {}); peer columns left empty", what, cmd, status));
    return std::nullopt;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(out);
    for (const auto& n : j.value("notes", nlohmann::json::array()))
      report.add_note(what + ": " + n.get<std::string>());
    return j;
  } catch (const nlohmann::json::exception& e) {
    report.add_note(fmt::format("{}: unreadable output of '{}' ({})", what, cmd, e.what()));
    return std::nullopt;
  }
}

void fill_uniform(float* x, int64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = static_cast<float>(static_cast<double>(s >> 40) * (16.0 / 16777216.0) - 8.0);  // 24 bits
  }
}

}  // namespace minigpt::cli
