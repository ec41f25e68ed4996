#include "dist/grad_buckets.h"

#include "core/error.h"
#include "core/timer.h"
#include "dist/grad_layout.h"

#include <algorithm>
#include <cstring>

namespace minigpt::dist {

GradBuckets::GradBuckets(const ModelConfig& config, ModelWeights& g, Communicator& comm)
    : n_layer_(config.n_layer), comm_(comm) {
  check_weights(g, config);
  const auto named = g.named();  // the canonical order grad_bucket_members indexes
  for (const std::vector<size_t>& members : grad_bucket_members(config)) {
    Bucket& b = buckets_.emplace_back();
    for (const size_t i : members) b.tensors.push_back(named[i].second);
    size_t n = 0;
    for (const Tensor* t : b.tensors) n += static_cast<size_t>(t->numel());
    b.buffer.resize(n);
    stats_.bytes += static_cast<int64_t>(n * sizeof(float));
  }
  stats_.buckets = static_cast<int>(buckets_.size());
}

GradBuckets::Bucket& GradBuckets::bucket_for(int stage) {
  return buckets_[grad_bucket_index(stage, n_layer_)];
}

void GradBuckets::on_ready(int stage) {
  Bucket& b = bucket_for(stage);
  MINIGPT_CHECK(!b.pending, "gradient stage {} reported final twice in one step", stage);
  float* out = b.buffer.data();
  for (const Tensor* t : b.tensors) out = std::copy_n(t->data(), t->numel(), out);
  b.pending = comm_.start_all_reduce_sum(b.buffer.data(), b.buffer.size());
  for (Bucket& other : buckets_)  // drive the engine: earlier buckets progress meanwhile
    if (other.pending) other.pending->test();
}

std::vector<size_t> GradBuckets::bucket_floats() const {
  std::vector<size_t> n;
  for (const Bucket& b : buckets_) n.push_back(b.buffer.size());
  return n;
}

void GradBuckets::finish() {
  Timer timer;
  const float scale = 1.0f / static_cast<float>(comm_.size());
  for (Bucket& b : buckets_) {
    MINIGPT_CHECK(b.pending, "finish(): a gradient bucket was never started (backward without on_ready?)");
    b.pending->wait();
    b.pending.reset();
  }
  stats_.exposed_s = timer.elapsed_s();
  for (Bucket& b : buckets_) {
    const float* in = b.buffer.data();
    for (Tensor* t : b.tensors) {
      float* p = t->data();
      for (int64_t i = 0; i < t->numel(); ++i) p[i] = in[i] * scale;
      in += t->numel();
    }
  }
}

}  // namespace minigpt::dist
