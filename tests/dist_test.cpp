// src/dist: GradBuckets over a fake two-rank communicator (the average of two equal
// gradients is the gradient; every bucket reduced once per step, in the backward's order),
// the planner's DDP payload equal to the bytes GradBuckets reduces, and the host logic of the
// NCCL path that needs no GPU: the flat buffer's buckets (grad_layout.h), the rank -> GPU
// assignment and the bounded wait with its timeout message (nccl_host.h), and `--dist nccl`
// refused by a build without NCCL. The NCCL calls themselves are in tests/cuda/nccl_test.cpp.
#include "core/error.h"
#include "core/timer.h"
#include "dist/communicator.h"
#include "dist/grad_buckets.h"
#include "dist/grad_layout.h"
#include "dist/local_ranks.h"
#include "dist/nccl_host.h"
#include "dist/parallel_plan.h"
#include "expect_error.h"
#include "model/gpt.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
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


TEST(GradLayout, BucketIndexFollowsTheBackward) {
  EXPECT_EQ(dist::grad_bucket_index(GrammarMiniGPT::kHeadStage, 4), 0u);
  EXPECT_EQ(dist::grad_bucket_index(3, 4), 1u);  // block L-1 is final first
  EXPECT_EQ(dist::grad_bucket_index(0, 4), 4u);
  EXPECT_EQ(dist::grad_bucket_index(GrammarMiniGPT::kEmbeddingStage, 4), 5u);
  EXPECT_ERROR(dist::grad_bucket_index(4, 4), "gradient stage 4 is not a block of 4");
  EXPECT_ERROR(dist::grad_bucket_index(-3, 4), "gradient stage -3");
}

TEST(GradLayout, FlatBucketsAreTheCanonicalRunsOfEachGroup) {
  const ModelConfig c = tiny();
  const auto params = expected_parameters(c);
  const auto members = dist::grad_bucket_members(c);
  const auto spans = dist::flat_grad_buckets(c);
  ASSERT_EQ(spans.size(), static_cast<size_t>(c.n_layer) + 2);
  ASSERT_EQ(members.size(), spans.size());
  dist::check_flat_spans(spans, static_cast<size_t>(c.parameter_count()));  // tiles the buffer
  std::vector<size_t> offset(params.size() + 1, 0);
  for (size_t i = 0; i < params.size(); ++i) offset[i + 1] = offset[i] + static_cast<size_t>(shape_numel(params[i].second));
  for (size_t b = 0; b < spans.size(); ++b) {
    EXPECT_EQ(spans[b].offset, offset[members[b].front()]) << "bucket " << b;
    size_t n = 0;
    for (const size_t i : members[b]) n += static_cast<size_t>(shape_numel(params[i].second));
    EXPECT_EQ(spans[b].count, n) << "bucket " << b;
  }
  EXPECT_EQ(params[members.front().front()].first, "ln_f.weight");   // head first
  EXPECT_EQ(params[members[1].front()].first, "blocks.1.ln1.weight");  // then the last block
  EXPECT_EQ(params[members.back().front()].first, "wte.weight");     // embeddings last
  EXPECT_EQ(spans.back().offset, 0u);
  // The CPU reducer packs the same groups: its buckets have the same sizes, in the same order.
  ModelWeights grads = ModelWeights::zeros_like(c);
  Mirror mirror;
  const std::vector<size_t> packed = dist::GradBuckets(c, grads, mirror).bucket_floats();
  for (size_t b = 0; b < spans.size(); ++b) EXPECT_EQ(packed[b], spans[b].count) << "bucket " << b;
}

TEST(GradLayout, BucketsOverArenaSlotsCarryTheGaps) {
  const ModelConfig c = tiny();
  const auto params = expected_parameters(c);
  std::vector<size_t> offsets;  // each tensor rounded up to 64 floats (an arena's 256 bytes)
  size_t next = 0;
  for (const auto& [name, shape] : params) {
    offsets.push_back(next);
    next += (static_cast<size_t>(shape_numel(shape)) + 63) / 64 * 64;
  }
  const auto spans = dist::grad_buckets_at(c, offsets);
  const auto members = dist::grad_bucket_members(c);
  const size_t end = offsets.back() + static_cast<size_t>(shape_numel(params.back().second));
  dist::check_flat_spans(spans, end);  // tiles [0, end of lm_head.bias)
  for (size_t b = 0; b < spans.size(); ++b) EXPECT_EQ(spans[b].offset, offsets[members[b].front()]) << b;
  EXPECT_EQ(spans.back().count, offsets[2]);  // embeddings: wte, wpe and the gap before blocks.0
  std::vector<size_t> bad = offsets;
  bad[0] = 64;
  EXPECT_ERROR(dist::grad_buckets_at(c, bad), "the first tensor (wte.weight) is at float 64, not 0");
  bad = offsets;
  bad[1] = 1;
  EXPECT_ERROR(dist::grad_buckets_at(c, bad), "wte.weight at float 0 overlaps wpe.weight at float 1");
  bad.pop_back();
  EXPECT_ERROR(dist::grad_buckets_at(c, bad), "tensor offsets for");
}

TEST(GradLayout, SpansMustTileTheBuffer) {
  using S = dist::FlatSpan;
  dist::check_flat_spans({S{4, 6}, S{0, 4}}, 10);  // any order
  EXPECT_ERROR(dist::check_flat_spans({}, 10), "no bucket");
  EXPECT_ERROR(dist::check_flat_spans({S{0, 4}, S{5, 5}}, 10), "floats [4, 5) are in no bucket");
  EXPECT_ERROR(dist::check_flat_spans({S{0, 5}, S{4, 6}}, 10), "floats [4, 5) are in two buckets");
  EXPECT_ERROR(dist::check_flat_spans({S{0, 4}}, 10), "cover 4 floats of a buffer of 10");
  EXPECT_ERROR(dist::check_flat_spans({S{0, 10}, S{10, 0}}, 10), "is empty");
}

TEST(NcclHost, EachLocalRankDrivesItsOwnDevice) {
  EXPECT_EQ(dist::device_for_rank(0, 2), 0);
  EXPECT_EQ(dist::device_for_rank(1, 2), 1);
  EXPECT_EQ(dist::device_for_rank(3, 2), 1);
  EXPECT_EQ(dist::device_for_rank(1, 1), 0);  // CUDA_VISIBLE_DEVICES narrowed to one GPU per rank
  EXPECT_ERROR(dist::device_for_rank(0, 0), "no CUDA GPU is visible");
  EXPECT_ERROR(dist::device_for_rank(-1, 2), "negative");
}

TEST(NcclHost, BoundedWaitReturnsOnceDone) {
  int polls = 0, aborts = 0;
  dist::wait_with_deadline([&] { return ++polls == 3; }, [&] { ++aborts; }, {0, 2, 5.0}, "a test wait");
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(aborts, 0);
}

TEST(NcclHost, BoundedWaitAbortsAndNamesTheRankAndTheTimeout) {
  int aborts = 0;
  Timer timer;
  EXPECT_ERROR(dist::wait_with_deadline([] { return false; }, [&] { ++aborts; }, {1, 2, 0.05}, "a gradient all-reduce"),
               "rank 1 of 2: a gradient all-reduce did not complete within 0.05 s; a peer rank is dead, hung or "
               "never joined (the NCCL communicator was aborted");
  EXPECT_EQ(aborts, 1);
  EXPECT_LT(timer.elapsed_s(), 2.0);  // the deadline, not a hang (generous: a loaded machine)
  // An engine error reported by the poll ends the wait at once, without the timeout's abort.
  EXPECT_ERROR(dist::wait_with_deadline([]() -> bool { MINIGPT_FAIL("NCCL reports 'remote error'"); },
                                        [&] { ++aborts; }, {0, 2, 5.0}, "x"),
               "remote error");
  EXPECT_EQ(aborts, 1);
  EXPECT_ERROR(dist::wait_with_deadline([] { return true; }, [] {}, {0, 1, 0.0}, "x"), "must be positive");
}

TEST(NcclHost, AnUnknownEngineIsRefused) {
  EXPECT_ERROR(dist::make_communicator("gloo", 30.0), "expected single, mpi or nccl");
}

TEST(NcclHost, DistNcclNeedsAnNcclBuild) {
#if MINIGPT_HAVE_NCCL
  GTEST_SKIP() << "built with NCCL: `--dist nccl` is tested in tests/cuda/nccl_test.cpp and python/tests/test_distributed.py";
#else
  EXPECT_ERROR(dist::make_communicator("nccl", 30.0), "--dist nccl: this minigpt was built without NCCL");
#endif
}

}  // namespace
}  // namespace minigpt

TEST(LocalRanks, RerunsTheCommandLineUnderMpirunWithNcclInsteadOfGpus) {
  using V = std::vector<std::string>;
  // --gpus and its value removed, --dist replaced by nccl, everything else kept in order
  EXPECT_EQ(minigpt::dist::local_ranks_command("/usr/bin/mpirun", "/opt/minigpt",
                                V{"minigpt", "-t", "1", "train", "--device", "cuda", "--gpus", "2", "--steps", "5"}, 2, false),
            (V{"/usr/bin/mpirun", "--bind-to", "none", "-np", "2", "/opt/minigpt", "-t", "1", "train", "--device", "cuda",
               "--steps", "5", "--dist", "nccl"}));
  EXPECT_EQ(minigpt::dist::local_ranks_command("mpirun", "/x", V{"minigpt", "bench", "train", "--gpus=4", "--dist", "single", "-B", "8"}, 4, true),
            (V{"mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "4", "/x", "bench", "train", "--dist", "nccl",
               "-B", "8"}));
  EXPECT_EQ(minigpt::dist::local_ranks_command("mpirun", "/x", V{"minigpt", "train", "--dist=mpi", "--gpus", "2"}, 2, false),
            (V{"mpirun", "--bind-to", "none", "-np", "2", "/x", "train", "--dist", "nccl"}));
}

TEST(LocalRanks, TooFewGpusIsAClearErrorBeforeAnythingStarts) {
  // This machine has fewer than 64 GPUs: the check fails before mpirun is looked for.
  EXPECT_ERROR(minigpt::dist::exec_local_ranks({"minigpt", "train", "--gpus", "64"}, 64, "train"), "train --gpus 64: ");
  EXPECT_ERROR(minigpt::dist::exec_local_ranks({"minigpt", "train", "--gpus", "64"}, 64, "train"), "one rank per GPU needs 64");
}

// The default thread count's divisor: the ranks mpirun put on this host (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE), 1 outside mpirun or when the variable is not a count.
TEST(LocalRanks, LocalRankCountComesFromTheLauncher) {
  const char* saved = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const std::string keep = saved ? saved : "";
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(minigpt::dist::local_rank_count(), 1);
  for (const auto& [value, want] : std::vector<std::pair<const char*, int>>{{"2", 2}, {"8", 8}, {"", 1}, {"0", 1}, {"-3", 1}, {"2x", 1}}) {
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", value, 1);
    EXPECT_EQ(minigpt::dist::local_rank_count(), want) << "OMPI_COMM_WORLD_LOCAL_SIZE='" << value << "'";
  }
  if (saved)
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", keep.c_str(), 1);
  else
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}
