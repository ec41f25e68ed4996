#include "dist/grad_layout.h"

#include "core/error.h"
#include "model/gpt.h"
#include "model/weights.h"

#include <algorithm>
#include <numeric>

namespace minigpt::dist {

namespace {
constexpr size_t kEmbeddingTensors = 2;  // wte, wpe lead the canonical order
constexpr size_t kBlockTensors = 12;     // ln1, qkv, proj, ln2, fc1, fc2: weight and bias each
constexpr size_t kHeadTensors = 4;       // ln_f.{weight,bias}, lm_head.{weight,bias} end it
}  // namespace

size_t grad_bucket_index(int stage, int n_layer) {
  if (stage == GrammarMiniGPT::kHeadStage) return 0;
  if (stage == GrammarMiniGPT::kEmbeddingStage) return static_cast<size_t>(n_layer) + 1;
  MINIGPT_CHECK(stage >= 0 && stage < n_layer, "gradient stage {} is not a block of {}", stage, n_layer);
  return static_cast<size_t>(n_layer - stage);  // block L-1 is bucket 1
}

std::vector<std::vector<size_t>> grad_bucket_members(const ModelConfig& config) {
  const auto L = static_cast<size_t>(config.n_layer);
  const size_t total = expected_parameters(config).size();
  MINIGPT_CHECK(total == kEmbeddingTensors + L * kBlockTensors + kHeadTensors,
                "grad_bucket_members: {} parameters do not match the layout of {} blocks", total, L);
  auto run = [](size_t first, size_t n) {
    std::vector<size_t> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
  };
  std::vector<std::vector<size_t>> buckets;
  buckets.push_back(run(total - kHeadTensors, kHeadTensors));
  for (size_t l = L; l-- > 0;) buckets.push_back(run(kEmbeddingTensors + l * kBlockTensors, kBlockTensors));
  buckets.push_back(run(0, kEmbeddingTensors));
  return buckets;
}

std::vector<FlatSpan> flat_grad_buckets(const ModelConfig& config) {
  std::vector<size_t> offsets;  // packed: prefix sums of the sizes
  size_t next = 0;
  for (const auto& [name, shape] : expected_parameters(config)) {
    offsets.push_back(next);
    next += static_cast<size_t>(shape_numel(shape));
  }
  return grad_buckets_at(config, offsets);
}

std::vector<FlatSpan> grad_buckets_at(const ModelConfig& config, const std::vector<size_t>& offsets) {
  const auto params = expected_parameters(config);
  MINIGPT_CHECK(offsets.size() == params.size(), "gradient buckets: {} tensor offsets for {} parameters",
                offsets.size(), params.size());
  MINIGPT_CHECK(offsets.front() == 0, "gradient buckets: the first tensor ({}) is at float {}, not 0",
                params.front().first, offsets.front());
  for (size_t i = 0; i + 1 < params.size(); ++i)
    MINIGPT_CHECK(offsets[i] + static_cast<size_t>(shape_numel(params[i].second)) <= offsets[i + 1],
                  "gradient buckets: {} at float {} overlaps {} at float {}", params[i].first, offsets[i],
                  params[i + 1].first, offsets[i + 1]);
  const size_t end = offsets.back() + static_cast<size_t>(shape_numel(params.back().second));
  // Members are consecutive canonical indices (grad_bucket_members builds runs), so a bucket
  // ends where the tensor after its last member begins.
  std::vector<FlatSpan> spans;
  for (const std::vector<size_t>& members : grad_bucket_members(config)) {
    const size_t first = offsets[members.front()];
    const size_t stop = members.back() + 1 < offsets.size() ? offsets[members.back() + 1] : end;
    spans.push_back({first, stop - first});
  }
  return spans;
}

void check_flat_spans(const std::vector<FlatSpan>& spans, size_t total) {
  MINIGPT_CHECK(!spans.empty(), "gradient buckets: no bucket given for a buffer of {} floats", total);
  std::vector<FlatSpan> sorted = spans;
  std::sort(sorted.begin(), sorted.end(), [](const FlatSpan& a, const FlatSpan& b) { return a.offset < b.offset; });
  size_t next = 0;
  for (const FlatSpan& s : sorted) {
    MINIGPT_CHECK(s.count > 0, "gradient buckets: the bucket at offset {} is empty", s.offset);
    MINIGPT_CHECK(s.offset == next, "gradient buckets: floats [{}, {}) {} (buckets must tile the buffer)",
                  std::min(next, s.offset), std::max(next, s.offset),
                  s.offset > next ? "are in no bucket" : "are in two buckets");
    next = s.offset + s.count;
  }
  MINIGPT_CHECK(next == total, "gradient buckets cover {} floats of a buffer of {}", next, total);
}

}  // namespace minigpt::dist
