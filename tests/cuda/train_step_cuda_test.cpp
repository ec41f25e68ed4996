// The training step on the GPU (train/cuda_train_step.h, Trainer with Device::CUDA) against the
// CPU engine: every gradient within 1e-4 relative per tensor (shipped model and a tiny config),
// 50 training steps from one seed within 1e-4 of the CPU's weights (but the key bias, whose true
// gradient is 0: see the test) with the same losses, two
// GPU runs bit for bit the same, the gradient and stage hooks inside the graph, and the errors (no GPU,
// out of memory, a bad batch, divergence leaving the weights untouched).
// Tests that need a GPU skip, saying so; the no-GPU error test runs only without one.
#include "core/error.h"
#include "core/thread_pool.h"
#include "expect_error.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "train/cuda_train_step.h"
#include "train/trainer.h"
#include "cuda/train_test_util.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace minigpt;
using namespace minigpt::cudatest;

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 32;  // head size 16, as the shipped model
  c.block_size = 16;
  c.vocab_size = 50;
  return c;
}

// ids uniform in [0, V); targets too, every 7th ignored (-1).
void random_batch(int64_t N, int V, uint32_t seed, std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> u(0, V - 1);
  ids.resize(N);
  targets.resize(N);
  for (int64_t i = 0; i < N; ++i) {
    ids[i] = u(gen);
    targets[i] = i % 7 == 3 ? -1 : u(gen);
  }
}

// Every gradient of one batch on the GPU against GrammarMiniGPT::backward.
void expect_gradients_match(const ModelConfig& c, const ModelWeights& w, int64_t B, int64_t T) {
  std::vector<int32_t> ids, targets;
  random_batch(B * T, c.vocab_size, 99, ids, targets);
  GrammarMiniGPT cpu(c, w.clone());
  const float cpu_loss = cpu.forward_train(ids.data(), targets.data(), B, T, pool());
  ModelWeights cpu_grads = ModelWeights::zeros_like(c);
  cpu.backward(cpu_grads, pool());

  CudaTrainStep gpu(c, AdamWConfig{}, 1.0f, B, T);
  gpu.upload(w, ModelWeights::zeros_like(c), ModelWeights::zeros_like(c));
  const float gpu_loss = gpu.forward_backward(ids.data(), targets.data());
  ModelWeights gpu_grads;
  gpu.download_grads(gpu_grads);
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * cpu_loss);
  const auto a = gpu_grads.named();
  const auto b = cpu_grads.named();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double r = rel_diff(a[i].second->data(), b[i].second->data(), static_cast<size_t>(b[i].second->numel()));
    worst = std::max(worst, r);
    EXPECT_LE(r, 1e-4) << a[i].first;
  }
  std::printf("gradients (B=%ld, T=%ld): loss %.7f vs CPU %.7f, worst tensor %.3g relative\n",
              static_cast<long>(B), static_cast<long>(T), gpu_loss, cpu_loss, worst);
}

TEST(CudaTrainStep, GradientsMatchCpuOnTheShippedModel) {
  REQUIRE_GPU();
  const ModelFile f = load_model(std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors");
  expect_gradients_match(f.config, f.weights, 64, 16);
  expect_gradients_match(f.config, f.weights, 3, f.config.block_size);  // T = 64: the largest tiles
}

TEST(CudaTrainStep, GradientsMatchCpuOnATinyConfig) {
  REQUIRE_GPU();
  const ModelConfig c = tiny_config();
  expect_gradients_match(c, ModelWeights::init_random(c, 3), 5, 16);
  expect_gradients_match(c, ModelWeights::init_random(c, 4), 2, 1);
}

TrainOptions fifty_steps() {
  TrainOptions o;
  o.seed = 11;
  o.steps = 50;
  o.batch = 16;
  o.seq = 16;
  o.lr = 3e-3f;
  o.min_lr = 3e-4f;
  o.warmup = 10;  // warm-up and cosine: the lr changes every replay
  o.model = tiny_config();
  return o;
}

std::vector<std::string> words(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("w" + std::to_string(i));
  return v;
}

TokenStream token_stream(int V, size_t n) {
  auto s = std::make_shared<std::vector<int32_t>>(n);
  std::mt19937 gen(7);
  for (size_t i = 0; i < n; ++i) (*s)[i] = static_cast<int32_t>((i * 3 + gen() % 5) % static_cast<size_t>(V));
  return s;
}

TEST(CudaTrainStep, FiftyStepsMatchTheCpuAndRepeatBitForBit) {
  REQUIRE_GPU();
  const TrainOptions o = fifty_steps();
  const TokenStream stream = token_stream(o.model.vocab_size, 20000);
  Trainer cpu(o, words(o.model.vocab_size), stream, nullptr);
  Trainer gpu(o, words(o.model.vocab_size), stream, nullptr, nullptr, Device::CUDA);
  Trainer again(o, words(o.model.vocab_size), stream, nullptr, nullptr, Device::CUDA);
  double worst_loss = 0.0;
  for (int i = 0; i < 50; ++i) {
    const StepStats a = cpu.train_step(pool()), b = gpu.train_step(pool()), c = again.train_step(pool());
    worst_loss = std::max(worst_loss, std::abs(static_cast<double>(b.loss) - a.loss) / a.loss);
    EXPECT_NEAR(b.loss, a.loss, 1e-4 * a.loss) << "step " << i;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << i;
    EXPECT_EQ(b.loss, c.loss) << "step " << i;  // reproducible: the same bits
  }
  const auto cw = cpu.model().weights().named();
  const auto gw = gpu.model().weights().named();
  const auto aw = again.model().weights().named();
  // The k third of each qkv bias has an exactly zero gradient (adding a constant to every key
  // of a row shifts the row's scores by q.b_k, which the softmax ignores): both engines update
  // it with AdamW-normalised rounding noise, which differs. It is compared on its own, in
  // absolute terms (each step moves it by at most ~lr); the q and v thirds at 1e-4.
  const int64_t d = o.model.d_model;
  double worst = 0.0, k_bias = 0.0;
  for (size_t i = 0; i < cw.size(); ++i) {
    const std::string& name = cw[i].first;
    const float* g = gw[i].second->data();
    const float* c = cw[i].second->data();
    const size_t n = static_cast<size_t>(cw[i].second->numel());
    EXPECT_EQ(std::memcmp(g, aw[i].second->data(), n * sizeof(float)), 0) << name;
    double r;
    if (name.find("attn.qkv.bias") != std::string::npos) {
      std::vector<float> gq(g, g + d), cq(c, c + d);  // q and v thirds
      gq.insert(gq.end(), g + 2 * d, g + 3 * d);
      cq.insert(cq.end(), c + 2 * d, c + 3 * d);
      r = rel_diff(gq, cq);
      k_bias = std::max(k_bias, max_abs_diff(g + d, c + d, static_cast<size_t>(d)));
    } else {
      r = rel_diff(g, c, n);
    }
    worst = std::max(worst, r);
    EXPECT_LE(r, 1e-4) << name;
  }
  EXPECT_LE(k_bias, 50 * o.lr);
  std::printf("50 steps: weights within %.3g relative (worst tensor), losses within %.3g relative; "
              "k bias (zero true gradient) within %.3g absolute\n",
              worst, worst_loss, k_bias);
  // the checkpoint carries the device's moments: resuming on the CPU continues the same run
  const TrainCheckpoint ck = gpu.checkpoint();
  EXPECT_EQ(ck.step, 50);
  EXPECT_LE(rel_diff(ck.adam_v.wte.data(), cpu.checkpoint().adam_v.wte.data(),
                     static_cast<size_t>(ck.adam_v.wte.numel())),
            1e-3);
}

TEST(CudaTrainStep, GradHookRunsInsideTheGraph) {
  REQUIRE_GPU();
  const ModelConfig c = tiny_config();
  const ModelWeights w = ModelWeights::init_random(c, 5);
  CudaTrainStep step(c, AdamWConfig{}, 1.0f, 2, 8);
  int calls = 0;
  step.set_grad_hook([&](float* grads, int64_t n, cudaStream_t s) {
    ++calls;
    EXPECT_EQ(n, step.flat_floats());
    MINIGPT_CUDA_CHECK(cudaMemsetAsync(grads, 0, static_cast<size_t>(n) * sizeof(float), s));  // "all-reduce"
  });
  step.upload(w, ModelWeights::zeros_like(c), ModelWeights::zeros_like(c));
  std::vector<int32_t> ids, targets;
  random_batch(16, c.vocab_size, 1, ids, targets);
  const float lr = 1e-2f;
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(step.step(ids.data(), targets.data(), lr, i).grad_norm, 0.0);
  EXPECT_EQ(calls, 1);  // captured once, replayed
  ModelWeights p, m, v;
  step.download(p, m, v);
  // zero gradients: only the decoupled decay moves the matrices; biases stay
  const float decay = 1.0f - lr * AdamWConfig{}.weight_decay;
  EXPECT_EQ(p.lm_head_weight.data()[5], w.lm_head_weight.data()[5] * decay * decay * decay);
  EXPECT_EQ(p.blocks[0].ln1_weight.data()[3], w.blocks[0].ln1_weight.data()[3]);
  const auto offsets = step.parameter_offsets();
  EXPECT_EQ(offsets.front().first, "wte.weight");
  EXPECT_EQ(offsets.front().second, 0);
}

// The stage hook (data parallel's buckets): called once per group of gradients, in the
// backward's order, while the step's graph is captured (not by the eager forward_backward), and
// each time the group's gradients are final on the stream: a copy forked from there (event,
// second stream) and joined back by the grad hook sees the same values as after the step.
TEST(CudaTrainStep, StageHookSeesEachGroupFinalInBackwardOrder) {
  REQUIRE_GPU();
  const ModelConfig c = tiny_config();
  const ModelWeights w = ModelWeights::init_random(c, 8);
  CudaTrainStep step(c, AdamWConfig{}, 1.0f, 2, 8);
  const auto offsets = step.parameter_offsets();
  const int64_t flat = step.flat_floats();
  DeviceArray<float> snapshot(static_cast<size_t>(flat));
  MINIGPT_CUDA_CHECK(cudaMemset(snapshot.get(), 0, static_cast<size_t>(flat) * sizeof(float)));
  MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t side = nullptr;
  MINIGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> events;
  // the group's span of the flat buffer: from its first tensor to the next group's first
  auto span_of = [&](int stage) -> std::pair<int64_t, int64_t> {
    auto at = [&](const std::string& name) {
      for (const auto& [n, o] : offsets)
        if (n == name) return o;
      ADD_FAILURE() << "no tensor " << name;
      return int64_t{0};
    };
    const std::string last = "blocks." + std::to_string(c.n_layer - 1) + ".";
    if (stage == GrammarMiniGPT::kHeadStage) return {at("ln_f.weight"), flat};
    if (stage == GrammarMiniGPT::kEmbeddingStage) return {0, at("blocks.0.ln1.weight")};
    const std::string next = stage + 1 < c.n_layer ? "blocks." + std::to_string(stage + 1) + ".ln1.weight" : "ln_f.weight";
    return {at("blocks." + std::to_string(stage) + ".ln1.weight"), at(next)};
  };
  std::vector<int> stages;
  step.set_stage_hook([&](int stage, cudaStream_t s) {
    stages.push_back(stage);
    cudaEvent_t e = nullptr;
    MINIGPT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events.push_back(e);
    MINIGPT_CUDA_CHECK(cudaEventRecord(e, s));
    MINIGPT_CUDA_CHECK(cudaStreamWaitEvent(side, e, 0));
    const auto [begin, end] = span_of(stage);
    MINIGPT_CUDA_CHECK(cudaMemcpyAsync(snapshot.get() + begin, step.grad_buffer() + begin,
                                       static_cast<size_t>(end - begin) * sizeof(float), cudaMemcpyDeviceToDevice,
                                       side));
  });
  step.set_grad_hook([&](float*, int64_t, cudaStream_t s) {
    cudaEvent_t e = nullptr;
    MINIGPT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events.push_back(e);
    MINIGPT_CUDA_CHECK(cudaEventRecord(e, side));
    MINIGPT_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
  });
  step.upload(w, ModelWeights::zeros_like(c), ModelWeights::zeros_like(c));
  // three batches: a copy made before its group was final would hold the previous gradients
  std::vector<int32_t> ids, targets;
  random_batch(16, c.vocab_size, 4, ids, targets);
  step.forward_backward(ids.data(), targets.data());
  EXPECT_TRUE(stages.empty()) << "the eager forward_backward must not call the stage hook";
  random_batch(16, c.vocab_size, 5, ids, targets);
  step.step(ids.data(), targets.data(), 1e-3f, 1);
  const std::vector<int> want = {GrammarMiniGPT::kHeadStage, 1, 0, GrammarMiniGPT::kEmbeddingStage};
  EXPECT_EQ(stages, want);
  random_batch(16, c.vocab_size, 6, ids, targets);
  step.step(ids.data(), targets.data(), 1e-3f, 2);
  EXPECT_EQ(stages, want);  // captured once, replayed
  ModelWeights grads;
  step.download_grads(grads);  // the second step's
  const std::vector<float> copied = snapshot.host();
  for (size_t i = 0; i < offsets.size(); ++i) {
    const Tensor& g = *grads.named()[i].second;
    EXPECT_EQ(std::memcmp(copied.data() + offsets[i].second, g.data(), g.nbytes()), 0) << offsets[i].first;
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  cudaStreamDestroy(side);
}

TEST(CudaTrainStep, WithoutAGpuIsAClearError) {
  if (gpu_visible()) GTEST_SKIP() << "a GPU is visible: this checks the error without one";
  EXPECT_ERROR(CudaTrainStep(tiny_config(), AdamWConfig{}, 1.0f, 2, 8), "cannot train on CUDA");
}

TEST(CudaTrainStep, OutOfMemoryNamesTheBytes) {
  REQUIRE_GPU();
  ModelConfig c = tiny_config();
  c.d_model = 1024;
  c.n_head = 64;
  c.block_size = 1024;
  c.vocab_size = 50000;
  // B*T = 2^20 rows of 50000 logits alone: 200 GB
  EXPECT_ERROR(CudaTrainStep(c, AdamWConfig{}, 1.0f, 1024, 1024), "bytes");
}

TEST(CudaTrainStep, BadBatchAndDivergenceChangeNothing) {
  REQUIRE_GPU();
  const ModelConfig c = tiny_config();
  ModelWeights w = ModelWeights::init_random(c, 6);
  CudaTrainStep step(c, AdamWConfig{}, 1.0f, 2, 8);
  std::vector<int32_t> ids, targets;
  random_batch(16, c.vocab_size, 2, ids, targets);
  ids[3] = c.vocab_size;
  EXPECT_ERROR(step.step(ids.data(), targets.data(), 1e-3f, 1), "outside the vocabulary");
  ids[3] = 0;
  targets[4] = -2;
  EXPECT_ERROR(step.forward_backward(ids.data(), targets.data()), "neither -1");
  targets[4] = 1;
  for (int64_t i = 0; i < w.lm_head_weight.numel(); ++i) w.lm_head_weight.data()[i] = i % 2 ? 3e38f : -3e38f;
  step.upload(w, ModelWeights::zeros_like(c), ModelWeights::zeros_like(c));
  EXPECT_ERROR(step.step(ids.data(), targets.data(), 1e-3f, 1), "training diverged");
  ModelWeights p, m, v;
  step.download(p, m, v);
  const auto a = p.named();
  const auto b = w.named();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].second->data(), b[i].second->data(), a[i].second->nbytes()), 0) << a[i].first;
}

}  // namespace
