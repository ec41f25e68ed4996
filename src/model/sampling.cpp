// Sampler: temperature + top-k over one logits row, in double so the draw does not depend on
// float rounding of the normalisation.
#include "model/sampling.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace minigpt {

void SamplingParams::validate() const {
  MINIGPT_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
                "temperature must be a finite number >= 0, got {}", temperature);
  MINIGPT_CHECK(top_k >= 0, "top-k must be >= 0 (0 keeps every token), got {}", top_k);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params) {
  params.validate();
  MINIGPT_CHECK(!logits.empty(), "cannot sample from empty logits");
  const int64_t V = static_cast<int64_t>(logits.size());
  for (int64_t i = 0; i < V; ++i) {
    MINIGPT_CHECK(!std::isnan(logits[static_cast<size_t>(i)]), "logit {} is NaN", i);
  }
  // Candidates sorted by logit, descending, lower id first on ties.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = params.candidates(V);
  auto by_logit = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  if (params.temperature == 0.0f) return order[0];

  // p_i ∝ exp((l_i - l_max) / temperature) over the k candidates; l_max subtracted so the
  // largest term is exp(0) = 1 and nothing overflows.
  const double lmax = logits[static_cast<size_t>(order[0])];
  MINIGPT_CHECK(lmax != -INFINITY, "cannot sample: every logit is -inf");
  if (lmax == INFINITY) return order[0];  // an infinite logit takes all the mass
  std::vector<double> weight(static_cast<size_t>(k));
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double l = logits[static_cast<size_t>(order[static_cast<size_t>(i)])];
    weight[static_cast<size_t>(i)] = std::exp((l - lmax) / params.temperature);
    total += weight[static_cast<size_t>(i)];
  }
  const double r = uniform() * total;
  double acc = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    acc += weight[static_cast<size_t>(i)];
    if (r < acc) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];  // r landed on the rounding edge of the total
}

}  // namespace minigpt
