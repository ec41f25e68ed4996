// What both device paths of `minigpt bench softmax` share: reading the peers' timings
// (softmax_peer_rows) and the input generator (fill_uniform). See bench_softmax.h.
#include "cli/bench_softmax.h"

#include <fmt/format.h>

namespace minigpt::cli {

std::vector<SoftmaxPeerRow> softmax_peer_rows(const nlohmann::json& answer, const std::string& what, Report& report) {
  std::vector<SoftmaxPeerRow> rows;
  for_each_peer_row(answer, "results", what, "a string peer, integer B >= 0, V >= 1 and runs, a positive time_us",
                    report, [&](const nlohmann::json& r) {
                      const auto peer = json_string(r, "peer");
                      const auto B = json_int(r, "B"), V = json_int(r, "V"), runs = json_int(r, "runs");
                      const auto us = json_number(r, "time_us");
                      if (!peer || !B || !V || !runs || !us || *B < 0 || *V < 1 || !(*us > 0)) return false;
                      rows.push_back({*peer, *B, *V, *us, static_cast<int>(*runs)});
                      return true;
                    });
  return rows;
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
