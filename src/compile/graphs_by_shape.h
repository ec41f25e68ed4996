// GraphsByShape<G>: a compiled model's shape guard and graph cache, one compiled graph G per
// (B, T). A call of a shape seen before gets its graph; a new shape is compiled by the caller's
// build function (the guard's miss path; after the first compile a line says which shape was
// compiled and which was called) and kept. CompiledModel (runner.h, the C++ back end) and
// CudaCompiledModel (cuda/runner_cuda.h) share it.
//
// What it does not do: compile (build does), or evict (a model serves few shapes).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string_view>
#include <utility>

namespace minigpt::compile {

template <class G>
class GraphsByShape {
 public:
  // The graph for (B, T): the one compiled before, or build() (a std::unique_ptr<G>), which the
  // guard's miss announces on stderr (unless quiet) as the model `label`'s, naming the shape of
  // the call before.
  template <class Build>
  G& get(int64_t B, int64_t T, std::string_view label, bool quiet, Build&& build) {
    const std::pair<int64_t, int64_t> before = last_;
    last_ = {B, T};
    if (const auto it = graphs_.find(last_); it != graphs_.end()) return *it->second;
    if (!quiet && compiles_ > 0)
      fmt::print(stderr, "minigpt compile: shape guard failed: {} compiled for (B={}, T={}), called with (B={}, T={}); compiling anew\n",
                 label, before.first, before.second, B, T);
    std::unique_ptr<G> g = build();
    ++compiles_;
    return *graphs_.emplace(last_, std::move(g)).first->second;
  }
  int compiles() const { return compiles_; }

 private:
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<G>> graphs_;
  std::pair<int64_t, int64_t> last_{0, 0};
  int compiles_ = 0;
};

}  // namespace minigpt::compile
