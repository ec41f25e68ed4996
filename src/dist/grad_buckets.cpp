#include "dist/grad_buckets.h"

#include "core/error.h"
#include "core/timer.h"
#include "model/gpt.h"

#include <algorithm>
#include <cstring>

namespace minigpt::dist {

GradBuckets::GradBuckets(const ModelConfig& config, ModelWeights& g, Communicator& comm)
    : n_layer_(config.n_layer), comm_(comm) {
  check_weights(g, config);
  buckets_.resize(static_cast<size_t>(n_layer_) + 2);
  buckets_.front().tensors = {&g.ln_f_weight, &g.ln_f_bias, &g.lm_head_weight, &g.lm_head_bias};
  for (int l = n_layer_ - 1; l >= 0; --l) {
    BlockWeights& b = g.blocks[static_cast<size_t>(l)];
    bucket_for(l).tensors = {&b.ln1_weight, &b.ln1_bias, &b.qkv_weight, &b.qkv_bias,
                             &b.proj_weight, &b.proj_bias, &b.ln2_weight, &b.ln2_bias,
                             &b.fc1_weight, &b.fc1_bias, &b.fc2_weight, &b.fc2_bias};
  }
  buckets_.back().tensors = {&g.wte, &g.wpe};
  for (Bucket& b : buckets_) {
    size_t n = 0;
    for (const Tensor* t : b.tensors) n += static_cast<size_t>(t->numel());
    b.buffer.resize(n);
    stats_.bytes += static_cast<int64_t>(n * sizeof(float));
  }
  stats_.buckets = static_cast<int>(buckets_.size());
}

GradBuckets::Bucket& GradBuckets::bucket_for(int stage) {
  if (stage == GrammarMiniGPT::kHeadStage) return buckets_.front();
  if (stage == GrammarMiniGPT::kEmbeddingStage) return buckets_.back();
  MINIGPT_CHECK(stage >= 0 && stage < n_layer_, "gradient stage {} is not a block of {}", stage, n_layer_);
  return buckets_[static_cast<size_t>(n_layer_ - stage)];  // block L-1 is bucket 1
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
