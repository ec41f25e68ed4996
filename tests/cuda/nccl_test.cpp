// NCCL data parallelism on the GPU (dist/nccl_communicator.h, dist/device_grad_reducer.h).
// One GPU runs a world of one rank (NCCL refuses two ranks on one GPU): the all-reduce leaves
// its input bit for bit, whole or in the model's buckets, eagerly and captured in a CUDA graph,
// and the trainer over it (the all-reduces in the step's graph, overlapped with the backward or
// after it) trains bit for bit as the plain GPU trainer;
// a rank whose peer never joins times out with an Error naming it (in a child process, so that
// a hang fails the test instead of stalling ctest); the MPI bootstrap averages over however
// many processes `mpirun -np N` started (NcclMpi: one under ctest). Two GPUs (skipped below
// two): two ranks as two threads of this process, one GPU each, average their buffers exactly.
// Every test skips, saying so, when no GPU is visible; the host logic (buckets, device choice,
// the bounded wait) is tested without a GPU in tests/dist_test.cpp.
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "dist/device_grad_reducer.h"
#include "dist/grad_layout.h"
#include "dist/nccl_communicator.h"
#include "expect_error.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_check.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/weights.h"
#include "train/cuda_data_parallel.h"
#include "train/cuda_train_step.h"
#include "train/trainer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using namespace minigpt;
using dist::NcclCommunicator;

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

#define REQUIRE_GPUS(n)                                                                          \
  if (visible_gpus() < (n))                                                                      \
  GTEST_SKIP() << ((n) == 1 ? std::string("no CUDA GPU visible")                                 \
                            : "needs " + std::to_string(n) + " CUDA GPUs, " +                    \
                                  std::to_string(visible_gpus()) + " visible (issue 17 runs it)")

// A host world of `size` ranks seen from rank 0 alone: its collectives do nothing, so an NCCL
// communicator of 2 built on it waits for a rank 1 that never comes.
struct LonelyHost final : dist::Communicator {
  explicit LonelyHost(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return "lonely"; }
  void all_reduce_sum(float*, size_t) override {}
  std::unique_ptr<dist::PendingReduce> start_all_reduce_sum(float* d, size_t n) override {
    return dist::SingleProcess().start_all_reduce_sum(d, n);
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
  int size_;
};

using Floats = cudatest::DeviceArray<float>;  // device memory (tests/cuda/cuda_test_util.h)

// These finish before they return: they run on the legacy default stream, which the tests'
// non-blocking streams do not wait for (and a pageable cudaMemcpy may return before its DMA).
void upload(Floats& d, const std::vector<float>& v) {
  MINIGPT_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());
}
void poison(Floats& d, size_t n) {  // NaN everywhere
  MINIGPT_CUDA_CHECK(cudaMemset(d.get(), 0xff, n * sizeof(float)));
  MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());
}

struct Stream {
  Stream() { MINIGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

// Not zeros: signs, magnitudes from 1e-30 to 1e30, an odd length.
std::vector<float> test_values(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float unit = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
    v[i] = scale * unit * (i % 97 == 0 ? 1e30f : i % 89 == 0 ? 1e-30f : 1.0f);
  }
  return v;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << what << ": element " << i << " is " << got[i]
                                                                << ", want " << want[i];
}

std::unique_ptr<NcclCommunicator> world_of_one() {
  return std::make_unique<NcclCommunicator>(std::make_unique<dist::SingleProcess>(), 0, 30.0);
}

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 16, c.block_size = 8, c.vocab_size = 11;
  return c;
}

TEST(Nccl, WorldOfOneAllReduceLeavesTheInput) {
  REQUIRE_GPUS(1);
  auto comm = world_of_one();
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "nccl");
  const std::vector<float> want = test_values(100'003);
  Floats d(want.size());
  upload(d, want);
  Stream stream;
  comm->all_reduce_avg(d.get(), want.size(), stream.s);
  comm->all_reduce_avg(d.get(), 0, stream.s);  // empty: nothing enqueued, no error
  comm->synchronize(stream.s, "the test's all-reduce");
  expect_bitwise(d.host(), want, "all_reduce_avg over 1 rank");
  std::vector<float> host = {1.5f, -2.0f};  // host collectives go through the host communicator
  comm->all_reduce_sum(host.data(), host.size());
  EXPECT_EQ(host, (std::vector<float>{1.5f, -2.0f}));
}

TEST(Nccl, ReducerBucketsOverlappedOrWholeLeaveTheInput) {
  REQUIRE_GPUS(1);
  auto comm = world_of_one();
  const ModelConfig c = tiny();
  const auto count = static_cast<size_t>(c.parameter_count());
  const std::vector<float> want = test_values(count);
  Floats grads(count);
  dist::DeviceGradReducer reducer(*comm, grads.get(), count, dist::flat_grad_buckets(c));
  EXPECT_EQ(reducer.payload_bytes(), 4 * c.parameter_count());
  EXPECT_EQ(reducer.reduced_bytes(), reducer.payload_bytes());  // packed: no gaps
  EXPECT_EQ(reducer.buckets().size(), static_cast<size_t>(c.n_layer) + 2);
  Stream compute;
  reducer.enable_timing();
  for (int step = 0; step < 3; ++step) {  // the events and streams are reused step after step
    upload(grads, want);
    reducer.bucket_ready(dist::grad_bucket_index(GrammarMiniGPT::kHeadStage, c.n_layer), compute.s);
    for (int l = c.n_layer - 1; l >= 0; --l) reducer.bucket_ready(dist::grad_bucket_index(l, c.n_layer), compute.s);
    reducer.bucket_ready(dist::grad_bucket_index(GrammarMiniGPT::kEmbeddingStage, c.n_layer), compute.s);
    reducer.finish(compute.s);
    comm->synchronize(compute.s, "the buckets' all-reduces");
    expect_bitwise(grads.host(), want, "bucketed");
    EXPECT_GE(reducer.exposed_ms(), 0.0);
    EXPECT_LT(reducer.exposed_ms(), 10'000.0);
  }
  upload(grads, want);
  reducer.reduce_all(compute.s);
  comm->synchronize(compute.s, "the whole buffer's all-reduce");
  expect_bitwise(grads.host(), want, "whole");
  // Misuse is an Error before anything is enqueued.
  EXPECT_ERROR(reducer.finish(compute.s), "gradient bucket 0 was never started");
  reducer.bucket_ready(1, compute.s);
  EXPECT_ERROR(reducer.bucket_ready(1, compute.s), "bucket 1 reported ready twice");
  EXPECT_ERROR(reducer.reduce_all(compute.s), "already started");
  EXPECT_ERROR(reducer.bucket_ready(99, compute.s), "gradient bucket 99 of 4");
  EXPECT_ERROR(dist::DeviceGradReducer(*comm, grads.get(), count, {{0, 3}}), "cover 3 floats");
  for (size_t k = 0; k < reducer.buckets().size(); ++k)  // complete the step begun above
    if (k != 1) reducer.bucket_ready(k, compute.s);
  reducer.finish(compute.s);
  comm->synchronize(compute.s, "the test's last step");
}

// Gradients in arena slots (each tensor rounded up to 64 floats, as CudaArena's 256 bytes): the
// reducer takes the tensors' pointers, and every tensor's values come back whole.
TEST(Nccl, ReducerOverArenaSlots) {
  REQUIRE_GPUS(1);
  auto comm = world_of_one();
  const ModelConfig c = tiny();
  const auto params = expected_parameters(c);
  std::vector<size_t> offsets;
  size_t end = 0;
  for (const auto& [name, shape] : params) {
    offsets.push_back(end);
    end += (static_cast<size_t>(shape_numel(shape)) + 63) / 64 * 64;
  }
  const std::vector<float> want = test_values(end);
  Floats grads(end);
  std::vector<std::pair<std::string, float*>> tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors.emplace_back(params[i].first, grads.get() + offsets[i]);
  dist::DeviceGradReducer reducer(*comm, c, tensors);
  EXPECT_EQ(reducer.payload_bytes(), 4 * c.parameter_count());
  EXPECT_GT(reducer.reduced_bytes(), reducer.payload_bytes());  // the gaps travel along
  EXPECT_EQ(reducer.buckets().back().offset, 0u);                // embeddings: wte first in memory
  upload(grads, want);
  Stream compute;
  for (size_t b = 0; b < reducer.buckets().size(); ++b) reducer.bucket_ready(b, compute.s);
  reducer.finish(compute.s);
  comm->synchronize(compute.s, "the arena buckets' all-reduces");
  std::vector<float> got = grads.host();
  got.resize(reducer.reduced_bytes() / sizeof(float));  // past the last tensor: not ours
  expect_bitwise(got, std::vector<float>(want.begin(), want.begin() + static_cast<long>(got.size())), "arena");
  std::swap(tensors[0], tensors[1]);  // wpe before wte: not the canonical order
  EXPECT_ERROR(dist::DeviceGradReducer(*comm, c, tensors), "lies before");
}

// The whole reduction captured in a CUDA graph after a copy that writes the gradients: each
// replay must copy, then reduce (the fork to the communication stream and the join back), so
// that the poisoned buffer ends equal to the source.
TEST(Nccl, ReducerCapturedInACudaGraph) {
  REQUIRE_GPUS(1);
  auto comm = world_of_one();
  const ModelConfig c = tiny();
  const auto count = static_cast<size_t>(c.parameter_count());
  const std::vector<float> want = test_values(count, 3.0f);
  Floats source(count), grads(count);
  upload(source, want);
  dist::DeviceGradReducer reducer(*comm, grads.get(), count, dist::flat_grad_buckets(c));
  Stream compute;
  // One eager step first, as a trainer warms up before it captures: NCCL connects its channels
  // lazily at the first collective, which must not happen inside a capture.
  for (size_t b = 0; b < reducer.buckets().size(); ++b) reducer.bucket_ready(b, compute.s);
  reducer.finish(compute.s);
  comm->synchronize(compute.s, "the eager warm-up step");
  cudaGraph_t graph = nullptr;
  MINIGPT_CUDA_CHECK(cudaStreamBeginCapture(compute.s, cudaStreamCaptureModeThreadLocal));
  MINIGPT_CUDA_CHECK(cudaMemcpyAsync(grads.get(), source.get(), count * sizeof(float), cudaMemcpyDeviceToDevice, compute.s));
  for (size_t b = 0; b < reducer.buckets().size(); ++b) reducer.bucket_ready(b, compute.s);
  reducer.finish(compute.s);
  MINIGPT_CUDA_CHECK(cudaStreamEndCapture(compute.s, &graph));
  cudaGraphExec_t exec = nullptr;
  MINIGPT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    poison(grads, count);
    MINIGPT_CUDA_CHECK(cudaGraphLaunch(exec, compute.s));
    comm->synchronize(compute.s, "the graph's all-reduces");
    expect_bitwise(grads.host(), want, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The production bootstrap: MPI gives the rank, the size and the local rank (the device), rank 0's
// unique id travels over MPI. Under ctest this is a world of one (MPI's singleton start); under
// `mpirun -np N nccl_test --gtest_filter='NcclMpi.*'` on N GPUs it is N processes, and rank r's
// buffer r+1 times the base values must average to (N+1)/2 times them on every rank.
TEST(NcclMpi, BootstrapsOverMpiAndAverages) {
  REQUIRE_GPUS(1);
  std::unique_ptr<NcclCommunicator> comm = dist::make_nccl_communicator(30.0);
  const int n = comm->size(), r = comm->rank();
  std::printf("rank %d of %d on CUDA device %d\n", r, n, comm->device());
  const std::vector<float> base = test_values(4099);
  std::vector<float> mine(base.size()), want(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    mine[i] = base[i] * static_cast<float>(r + 1);
    want[i] = base[i] * (static_cast<float>(n + 1) * 0.5f);
  }
  Floats d(base.size());
  upload(d, mine);
  Stream stream;
  comm->all_reduce_avg(d.get(), base.size(), stream.s);
  comm->synchronize(stream.s, "the test's all-reduce");
  const std::vector<float> got = d.host();
  if (n <= 2) {  // (a + 2a) / 2 and 1.5 a are both one rounding of the exact 1.5 a
    expect_bitwise(got, want, "mean over ranks");
  } else {  // more ranks: the order of the sum varies; a few roundings
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::abs(want[i]) * static_cast<float>(n)) << "element " << i;
  }
  comm->barrier();
}

// The trainer's NCCL path on one GPU (issue 16: "the same code path on a 1-rank communicator"):
// the gradient all-reduce inside the step's graph, the bounded step wait; averaging over one
// rank is a copy, so it trains bit for bit as the plain GPU trainer.
TEST(NcclTrainer, OneRankOverNcclTrainsBitForBitAsOneGpu) {
  REQUIRE_GPUS(1);
  TrainOptions o;
  o.seed = 5, o.steps = 12, o.batch = 8, o.seq = 16, o.warmup = 3;
  o.model.n_layer = 2, o.model.n_head = 2, o.model.d_model = 32, o.model.block_size = 16, o.model.vocab_size = 50;
  std::vector<std::string> vocab;
  for (int i = 0; i < o.model.vocab_size; ++i) vocab.push_back("w" + std::to_string(i));
  auto stream = std::make_shared<std::vector<int32_t>>(6000);
  for (size_t i = 0; i < stream->size(); ++i) (*stream)[i] = static_cast<int32_t>((i * 7 + i / 3) % 50);
  auto comm = world_of_one();
  ThreadPool pool(1);
  Trainer plain(o, vocab, stream, nullptr, nullptr, Device::CUDA);
  Trainer over_nccl(o, vocab, stream, nullptr, comm.get(), Device::CUDA);
  for (int64_t i = 0; i < o.steps; ++i) {
    const StepStats a = plain.train_step(pool), b = over_nccl.train_step(pool);
    ASSERT_EQ(a.loss, b.loss) << "step " << i;
    ASSERT_EQ(a.grad_norm, b.grad_norm) << "step " << i;
    EXPECT_EQ(a.comm_bytes, 0);
    EXPECT_EQ(b.comm_bytes, 4 * o.model.parameter_count());  // the planner's DDP payload
  }
  const auto pw = plain.model().weights().named();
  const auto nw = over_nccl.model().weights().named();
  for (size_t i = 0; i < pw.size(); ++i)
    EXPECT_EQ(std::memcmp(pw[i].second->data(), nw[i].second->data(), pw[i].second->nbytes()), 0) << pw[i].first;
  // The CPU trainer refuses NCCL (its gradients are host buffers), GPU ranks another engine.
  EXPECT_ERROR(Trainer(o, vocab, stream, nullptr, comm.get()), "the CPU trainer's ranks use --dist mpi");
  LonelyHost two(2);
  EXPECT_ERROR(Trainer(o, vocab, stream, nullptr, &two, Device::CUDA),
               "train --device cuda over 2 ranks reduces over NCCL: use --dist nccl, not --dist lonely");
}

// The overlapped path (a bucket per stage, all-reduced on a communication stream inside the
// step's graph as the backward goes on) against the all-reduce after the whole backward and the
// plain step: over one rank all three must give the same gradients, losses and weights bit for
// bit, step after step (different batches, so a bucket read before it was final would differ).
TEST(NcclTrainer, OverlappedBucketsTrainBitForBitAsAfterTheBackward) {
  REQUIRE_GPUS(1);
  ModelConfig c;
  c.n_layer = 3, c.n_head = 2, c.d_model = 32, c.block_size = 16, c.vocab_size = 50;
  const int64_t B = 4, T = 16;
  const ModelWeights w = ModelWeights::init_random(c, 11);
  auto comm = world_of_one();
  // the data-parallel objects outlive the steps (their graphs hold the reducers' events)
  std::unique_ptr<CudaDataParallel> dp_after_owner, dp_overlapped_owner;
  CudaTrainStep plain(c, AdamWConfig{}, 1.0f, B, T), after(c, AdamWConfig{}, 1.0f, B, T),
      overlapped(c, AdamWConfig{}, 1.0f, B, T);
  dp_after_owner = std::make_unique<CudaDataParallel>(after, *comm, GradSync::kAfterBackward);
  dp_overlapped_owner = std::make_unique<CudaDataParallel>(overlapped, *comm);
  CudaDataParallel& dp_after = *dp_after_owner;
  CudaDataParallel& dp_overlapped = *dp_overlapped_owner;
  EXPECT_EQ(dp_overlapped.mode(), GradSync::kOverlapped);
  EXPECT_EQ(dp_overlapped.buckets(), static_cast<size_t>(c.n_layer) + 2);
  EXPECT_EQ(dp_after.buckets(), 1u);
  for (CudaTrainStep* s : {&plain, &after, &overlapped})
    s->upload(w, ModelWeights::zeros_like(c), ModelWeights::zeros_like(c));
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), targets(ids.size());
  for (int64_t t = 1; t <= 6; ++t) {
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>((i * 13 + static_cast<size_t>(t) * 7) % 50);
      targets[i] = i % 9 == 2 ? -1 : static_cast<int32_t>((i * 5 + static_cast<size_t>(t)) % 50);
    }
    const CudaStepResult a = plain.step(ids.data(), targets.data(), 1e-2f, t);
    const CudaStepResult b = after.step(ids.data(), targets.data(), 1e-2f, t);
    const CudaStepResult o = overlapped.step(ids.data(), targets.data(), 1e-2f, t);
    ASSERT_EQ(a.loss, b.loss) << "step " << t;
    ASSERT_EQ(a.loss, o.loss) << "step " << t;
    ASSERT_EQ(a.grad_norm, b.grad_norm) << "step " << t;
    ASSERT_EQ(a.grad_norm, o.grad_norm) << "step " << t;
    ModelWeights ga, gb, go;
    plain.download_grads(ga);
    after.download_grads(gb);
    overlapped.download_grads(go);
    for (size_t i = 0; i < ga.named().size(); ++i) {
      const Tensor& x = *ga.named()[i].second;
      ASSERT_EQ(std::memcmp(x.data(), gb.named()[i].second->data(), x.nbytes()), 0) << ga.named()[i].first;
      ASSERT_EQ(std::memcmp(x.data(), go.named()[i].second->data(), x.nbytes()), 0) << ga.named()[i].first;
    }
    // GPU time, measured in the graph: finite, not negative (how much is hidden is the bench's)
    for (const CudaDataParallel* dp : {&dp_after, &dp_overlapped}) {
      EXPECT_GE(dp->exposed_ms(), 0.0);
      EXPECT_LT(dp->exposed_ms(), 10'000.0);
    }
  }
  EXPECT_GT(overlapped.graph_nodes(), after.graph_nodes());  // an all-reduce per bucket
  ModelWeights pa, ma, va, po, mo, vo;
  plain.download(pa, ma, va);
  overlapped.download(po, mo, vo);
  for (size_t i = 0; i < pa.named().size(); ++i)
    EXPECT_EQ(std::memcmp(pa.named()[i].second->data(), po.named()[i].second->data(), pa.named()[i].second->nbytes()),
              0)
        << pa.named()[i].first;
  const double alone = dp_overlapped.alone_ms(3);
  EXPECT_GE(alone, 0.0);  // over one rank NCCL may launch nothing but a scaling by 1
  EXPECT_LT(alone, 10'000.0);
  std::printf("overlapped buckets, 1 rank: exposed %.4f ms, buckets alone %.4f ms; after the backward: "
              "exposed %.4f ms\n",
              dp_overlapped.exposed_ms(), alone, dp_after.exposed_ms());
}

// Rank 0 of 2 whose rank 1 never calls init: joining must end with the Error within about the
// timeout (2 s), not hang. In a re-executed child (threadsafe death test): ncclCommAbort of a
// half-built communicator leaves NCCL's bootstrap thread behind, and a hang must fail the test
// (alarm) instead of stalling ctest.
TEST(NcclDeathTest, ARankThatNeverJoinsTimesOutNamingTheRank) {
  REQUIRE_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(60);
        Timer timer;
        try {
          NcclCommunicator comm(std::make_unique<LonelyHost>(2), 0, 2.0);
          std::fprintf(stderr, "rank 0 joined a world of 2 alone\n");
          std::_Exit(1);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s [after %.1f s]\n", e.what(), timer.elapsed_s());
          std::_Exit(timer.elapsed_s() < 20.0 ? 0 : 2);
        }
      },
      ::testing::ExitedWithCode(0),
      "rank 0 of 2: joining the NCCL communicator \\(CUDA device 0\\) did not complete within 2 s; a peer rank is "
      "dead, hung or never joined");
}

// Two ranks in one process, one thread and one GPU each; the unique id passes from rank 0's
// thread to rank 1's through ThreadHost (what MPI does between processes).
struct IdExchange {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<char> bytes;
};

struct ThreadHost final : dist::Communicator {
  ThreadHost(IdExchange& x, int rank) : x_(x), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string name() const override { return "threads"; }
  void all_reduce_sum(float*, size_t) override { MINIGPT_FAIL("ThreadHost: host all-reduce not needed"); }
  std::unique_ptr<dist::PendingReduce> start_all_reduce_sum(float*, size_t) override {
    MINIGPT_FAIL("ThreadHost: host all-reduce not needed");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    std::unique_lock lock(x_.mutex);
    if (rank_ == root) {
      x_.bytes.assign(static_cast<char*>(data), static_cast<char*>(data) + bytes);
      x_.cv.notify_all();
      return;
    }
    MINIGPT_CHECK(x_.cv.wait_for(lock, std::chrono::seconds(30), [&] { return x_.bytes.size() == bytes; }),
                  "ThreadHost: rank {} never received the broadcast", rank_);
    std::memcpy(data, x_.bytes.data(), bytes);
  }
  void barrier() override {}
  void abort(const std::string&) override {}
  IdExchange& x_;
  int rank_;
};

TEST(NcclTwoGpus, TwoRanksAverageExactly) {
  REQUIRE_GPUS(2);
  const ModelConfig c = tiny();
  const auto count = static_cast<size_t>(c.parameter_count());
  const std::vector<float> a = test_values(count, 1.0f), b = test_values(count, -0.75f);
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = (a[i] + b[i]) * 0.5f;  // N = 2: halving is exact
  IdExchange exchange;
  std::vector<float> got[2][2];  // [rank][whole, bucketed]
  std::string errors[2];
  auto run_rank = [&](int r) {
    try {
      MINIGPT_CUDA_CHECK(cudaSetDevice(r));
      NcclCommunicator comm(std::make_unique<ThreadHost>(exchange, r), r, 30.0);
      Floats grads(count);
      Stream stream;
      dist::DeviceGradReducer reducer(comm, grads.get(), count, dist::flat_grad_buckets(c));
      upload(grads, r == 0 ? a : b);
      reducer.reduce_all(stream.s);
      comm.synchronize(stream.s, "the whole buffer's all-reduce");
      got[r][0] = grads.host();
      upload(grads, r == 0 ? a : b);
      for (size_t k = 0; k < reducer.buckets().size(); ++k) reducer.bucket_ready(k, stream.s);
      reducer.finish(stream.s);
      comm.synchronize(stream.s, "the buckets' all-reduces");
      got[r][1] = grads.host();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread rank0(run_rank, 0), rank1(run_rank, 1);
  rank0.join();
  rank1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) {
    expect_bitwise(got[r][0], want, r == 0 ? "rank 0, whole" : "rank 1, whole");
    expect_bitwise(got[r][1], want, r == 0 ? "rank 0, bucketed" : "rank 1, bucketed");
  }
}

}  // namespace
