// src/dist: GradBuckets over a fake two-rank communicator (the average of two equal
// gradients is the gradient; every bucket reduced once per step, in the backward's order),
// and the planner's DDP payload equal to the bytes GradBuckets reduces.
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/grad_buckets.h"
#include "dist/parallel_plan.h"
#include "model/gpt.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace minigpt {
namespace {

// Two ranks that hold the same data: the sum is 2x. Records each reduce's size.
struct Mirror final : dist::Communicator {
  std::vector<size_t> reduced;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "mirror"; }
  void all_reduce_sum(float* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= 2.0f;
    reduced.push_back(n);
  }
  std::unique_ptr<dist::PendingReduce> start_all_reduce_sum(float* data, size_t n) override {
    all_reduce_sum(data, n);
    return dist::SingleProcess().start_all_reduce_sum(data, n);
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
};

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 16, c.block_size = 8, c.vocab_size = 11;
  return c;
}

TEST(GradBuckets, AveragesEveryGradientOnceInBackwardOrder) {
  const ModelConfig c = tiny();
  ThreadPool pool(1);
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 3));
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8}, targets = {2, 3, 4, 5, 6, 7, 8, 9};
  ModelWeights plain = ModelWeights::zeros_like(c), bucketed = ModelWeights::zeros_like(c);
  model.forward_train(ids.data(), targets.data(), 2, 4, pool);
  model.backward(plain, pool);
  Mirror mirror;
  dist::GradBuckets buckets(c, bucketed, mirror);
  std::vector<int> stages;
  model.forward_train(ids.data(), targets.data(), 2, 4, pool);
  model.backward(bucketed, pool, [&](int stage) {
    stages.push_back(stage);
    buckets.on_ready(stage);
  });
  buckets.finish();
  EXPECT_EQ(stages, (std::vector<int>{GrammarMiniGPT::kHeadStage, 1, 0, GrammarMiniGPT::kEmbeddingStage}));
  ASSERT_EQ(mirror.reduced.size(), 4u);
  const auto plain_named = plain.named();
  const auto bucketed_named = bucketed.named();
  for (size_t i = 0; i < plain_named.size(); ++i) {
    const Tensor& a = *plain_named[i].second;
    const Tensor& b = *bucketed_named[i].second;
    for (int64_t j = 0; j < a.numel(); ++j) ASSERT_EQ(a.data()[j], b.data()[j]) << plain_named[i].first;
  }
  EXPECT_THROW(buckets.finish(), Error);  // nothing started this step
}

TEST(ParallelPlan, DdpPayloadIsWhatGradBucketsReduce) {
  for (const ModelConfig& c : {tiny(), [] { ModelConfig g; g.vocab_size = 611; return g; }()}) {
    ModelWeights grads = ModelWeights::zeros_like(c);
    Mirror mirror;
    dist::GradBuckets buckets(c, grads, mirror);
    dist::PlanInput in;
    in.layers = c.n_layer, in.d_model = c.d_model, in.heads = c.n_head, in.vocab = c.vocab_size,
    in.seq = 4, in.context = c.block_size, in.batch = 8, in.gpus = 2;
    const auto plans = dist::plan_parallelism(in);
    EXPECT_EQ(plans[0].payload_bytes, buckets.stats().bytes);
    EXPECT_EQ(plans[0].payload_bytes, 4 * c.parameter_count());
    EXPECT_EQ(plans[0].calls, buckets.stats().buckets);
    EXPECT_DOUBLE_EQ(plans[0].wire_bytes, static_cast<double>(buckets.stats().bytes));  // 2(N-1)/N = 1 at N = 2
  }
}

TEST(ParallelPlan, FormulasAndChoice) {
  dist::PlanInput in;  // a 7B-like model on 8 GPUs of 141 GiB
  in.layers = 32, in.d_model = 4096, in.heads = 32, in.vocab = 32000, in.seq = 4096, in.batch = 64, in.gpus = 8;
  const auto p = dist::plan_parallelism(in);
  EXPECT_NEAR(p[1].wire_bytes, 1.5 * p[0].wire_bytes, 1e-6 * p[0].wire_bytes);  // FSDP = 1.5 x DDP
  EXPECT_NEAR(p[1].optimizer_gib * 8, p[0].optimizer_gib, 1e-9);               // sharded state
  EXPECT_FALSE(p[0].fits);  // 16 bytes x 7e9 > 141 GiB
  EXPECT_EQ(dist::cheapest_fitting(p) >= 0, p[1].fits || p[2].fits || p[3].fits);
  in.heads = 4;  // 4 heads do not split over 8 GPUs
  EXPECT_FALSE(dist::plan_parallelism(in)[2].valid);
  in.gpus = 0;
  EXPECT_THROW(dist::plan_parallelism(in), Error);
}

}  // namespace
}  // namespace minigpt
