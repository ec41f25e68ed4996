// Tests of src/train: AdamW against hand-computed steps, the lr schedule, gradient clipping,
// the batch sampler, that training lowers the loss, and that a run resumed from a checkpoint
// repeats an uninterrupted run's per-step losses bit for bit.
//
// The training tests use a tiny model (2 blocks, d = 16) on a synthetic stream with a learnable
// rule, so they run in well under a second and do not depend on the grammar corpus.
#include "core/error.h"
#include "io/atomic_file.h"
#include "train/adamw.h"
#include "train/batcher.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/progress.h"
#include "train/trainer.h"
#include "expect_error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <unistd.h>

namespace minigpt {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------- AdamW --

TEST(AdamW, FirstStepMatchesHandComputation) {
  // p = 1, g = 0.5, lr = 0.1, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, t = 1:
  //   decay: p = 1 * (1 - 0.1 * 0.1) = 0.99
  //   m = 0.05, v = 0.00025; m_hat = 0.5, sqrt(v_hat) = 0.5 -> update 0.5 / (0.5 + 1e-8) ~= 1
  //   p = 0.99 - 0.1 * 1 = 0.89          (0.9 without decay)
  AdamWConfig c{0.9f, 0.999f, 1e-8f, 0.1f};
  float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, 0.5f}, m[2] = {0, 0}, v[2] = {0, 0};
  adamw_update(p, g, m, v, 1, 0.1f, 0.1f, c, 1);
  adamw_update(p + 1, g + 1, m + 1, v + 1, 1, 0.1f, 0.0f, c, 1);
  EXPECT_NEAR(p[0], 0.89f, 1e-6f);
  EXPECT_NEAR(p[1], 0.90f, 1e-6f);
  // 1 - b2 is 0.999987e-3 in float (0.999f is not 0.999): relative 2e-5 of slack.
  EXPECT_NEAR(m[0], 0.05f, 1e-7f);
  EXPECT_NEAR(v[0], 0.00025f, 0.00025f * 2e-5f);
}

TEST(AdamW, SecondStepMatchesHandComputation) {
  // From the state after step 1 above (p = 0.89, m = 0.05, v = 0.00025), g = -1, t = 2:
  //   decay: p = 0.89 * 0.99 = 0.8811
  //   m = 0.9 * 0.05 - 0.1 = -0.055;       m_hat = -0.055 / (1 - 0.81)   = -0.289473684
  //   v = 0.999 * 0.00025 + 0.001 = 0.00124975; v_hat = v / (1 - 0.998001) = 0.625187594
  //   sqrt(v_hat) = 0.790688052; update = -0.366100...  p = 0.8811 + 0.1 * 0.366100 = 0.917710
  AdamWConfig c{0.9f, 0.999f, 1e-8f, 0.1f};
  float p = 0.89f, g = -1.0f, m = 0.05f, v = 0.00025f;
  adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.1f, c, 2);
  EXPECT_NEAR(m, -0.055f, 1e-7f);
  EXPECT_NEAR(v, 0.00124975f, 0.00124975f * 2e-5f);
  EXPECT_NEAR(p, 0.917710f, 2e-6f);
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.block_size = 16;
  c.vocab_size = 12;
  return c;
}

TEST(AdamW, DecaysOnlyMatricesAndEmbeddings) {
  const ModelConfig config = tiny_config();
  ModelWeights params = ModelWeights::zeros_like(config);
  ModelWeights grads = ModelWeights::zeros_like(config);
  for (auto& [name, t] : params.named()) t->fill(1.0f);  // zero gradient: only decay moves p
  AdamW opt(config, AdamWConfig{0.9f, 0.999f, 1e-8f, 0.5f});
  ThreadPool pool(2);
  opt.step(params, grads, 0.1f, pool);
  int decayed = 0;
  for (const auto& [name, t] : params.named()) {
    const bool matrix = t->dim() == 2;
    const float expected = matrix ? 0.95f : 1.0f;
    for (const float x : t->span()) ASSERT_FLOAT_EQ(x, expected) << name;
    decayed += matrix;
    if (name == "wte.weight" || name == "wpe.weight" || name == "lm_head.weight" ||
        name.ends_with("qkv.weight") || name.ends_with("fc1.weight")) {
      EXPECT_TRUE(matrix) << name;
    }
    if (name.find("ln") != std::string::npos || name.ends_with(".bias")) {
      EXPECT_FALSE(matrix) << name;
    }
  }
  EXPECT_EQ(decayed, 3 + 4 * config.n_layer);  // wte, wpe, lm_head + qkv, proj, fc1, fc2 per block
  EXPECT_EQ(opt.steps(), 1);
}

// -------------------------------------------------------------------- schedule and clipping --

TEST(LrSchedule, WarmupThenCosineToFloor) {
  const LrSchedule s{1.0f, 0.1f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(4), 0.5f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);                 // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6f);             // half way: (max + min) / 2
  EXPECT_NEAR(s.at(109), 0.1f + 0.9f * 0.5f * (1.0f + std::cos(3.14159265f * 0.99f)), 1e-6f);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(1000), 0.1f);
  for (int64_t i = 10; i < 110; ++i) EXPECT_LE(s.at(i + 1), s.at(i)) << i;
  EXPECT_ERROR((LrSchedule{1.0f, 2.0f, 10, 100}.validate()), "min lr must be in [0, lr = 1], got 2");
}

TEST(GradClip, GlobalNormAndScaling) {
  const ModelConfig config = tiny_config();
  ModelWeights g = ModelWeights::zeros_like(config);
  g.wte.data()[0] = 3.0f;
  g.lm_head_bias.data()[5] = 4.0f;  // global norm 5 across two tensors
  EXPECT_DOUBLE_EQ(global_grad_norm(g), 5.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 10.0), 5.0);  // below the limit: untouched
  EXPECT_FLOAT_EQ(g.wte.data()[0], 3.0f);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g.wte.data()[0], 0.6f, 1e-6f);
  EXPECT_NEAR(g.lm_head_bias.data()[5], 0.8f, 1e-6f);
  EXPECT_NEAR(global_grad_norm(g), 1.0, 1e-6);
  g.wpe.data()[1] = std::nanf("");
  EXPECT_ERROR(clip_grad_norm(g, 1.0), "gradient norm is nan: training diverged");
}

// ------------------------------------------------------------------------------- batches --

// A stream with a rule to learn: sentences <bos>=1, then a start word w in [4, 12), then
// w+1, w+2, ... wrapping within [4, 12), for a length of 3..6 words, then <eos>=2.
TokenStream rule_stream(uint64_t seed, int sentences) {
  auto s = std::make_shared<std::vector<int32_t>>();
  Rng rng{seed};
  for (int i = 0; i < sentences; ++i) {
    s->push_back(1);
    int32_t w = 4 + static_cast<int32_t>(rng.below(8));
    const int len = 3 + static_cast<int>(rng.below(4));
    for (int j = 0; j < len; ++j, w = 4 + (w - 4 + 1) % 8) s->push_back(w);
    s->push_back(2);
  }
  return s;
}

TEST(BatchSampler, TargetsAreIdsShiftedAndRestoreRepeats) {
  TokenStream stream = rule_stream(7, 200);
  BatchSampler a(stream, 4, 8, 123);
  std::vector<int32_t> ids(32), tg(32), ids2(32), tg2(32);
  a.next(ids.data(), tg.data());
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(tg[b * 8 + t], ids[b * 8 + t + 1]);
  const uint64_t state = a.rng_state(), drawn = a.windows_drawn();
  EXPECT_EQ(drawn, 4u);
  a.next(ids.data(), tg.data());
  BatchSampler b(stream, 4, 8, 999);
  b.restore(state, drawn);
  b.next(ids2.data(), tg2.data());
  EXPECT_EQ(ids, ids2);
  EXPECT_EQ(tg, tg2);
  EXPECT_ERROR(BatchSampler(std::make_shared<std::vector<int32_t>>(8, 1), 1, 8, 0), "fewer than one window of 9");
}

TEST(BatchSampler, EvalBatchesTileTheStream) {
  std::vector<int32_t> s(100);
  std::iota(s.begin(), s.end(), 0);
  EXPECT_EQ(eval_batch_count(s, 2, 10), 4);  // 9 windows of 10 (+1), 4 full batches of 2
  std::vector<int32_t> ids(20), tg(20);
  eval_batch(s, 2, 10, 3, ids.data(), tg.data());
  EXPECT_EQ(ids[0], 60);
  EXPECT_EQ(ids[10], 70);
  EXPECT_EQ(tg[19], 80);
  EXPECT_ERROR(eval_batch(s, 2, 10, 4, ids.data(), tg.data()), "eval batch 4 out of range (4 available)");
}

// ------------------------------------------------------------------------------ training --

TrainOptions tiny_options(int64_t steps) {
  TrainOptions o;
  o.seed = 5;
  o.steps = steps;
  o.batch = 8;
  o.seq = 12;
  o.lr = 1e-2f;
  o.min_lr = 1e-3f;
  o.warmup = 5;
  o.eval_batches = 4;
  o.model = tiny_config();
  return o;
}

std::vector<std::string> tiny_vocab() {
  std::vector<std::string> v = {"<pad>", "<bos>", "<eos>", "<unk>"};
  for (int i = 4; i < 12; ++i) v.push_back("w" + std::to_string(i));
  return v;
}

TEST(Trainer, LossFallsOnALearnableStream) {
  ThreadPool pool(2);
  Trainer t(tiny_options(150), tiny_vocab(), rule_stream(1, 2000), rule_stream(2, 200));
  const float before = *t.evaluate(pool);
  EXPECT_NEAR(before, std::log(12.0f), 0.3f);  // a fresh model is close to uniform
  std::vector<float> losses;
  run_training(t, {}, {.on_step = [&](const StepStats& s) { losses.push_back(s.loss); }, .on_eval = {}, .on_checkpoint = {}}, pool);
  ASSERT_EQ(losses.size(), 150u);
  const float after = *t.evaluate(pool);
  // The rule leaves only the start word and the length to chance: ~ (ln 8 + ln 4 * ...) / 7
  // nats per token; anything below 1.0 means the successor rule was learned.
  EXPECT_LT(after, 1.0f) << "before " << before;
  EXPECT_LT(std::accumulate(losses.end() - 10, losses.end(), 0.0f) / 10,
            std::accumulate(losses.begin(), losses.begin() + 10, 0.0f) / 10 - 1.0f);
}

std::vector<float> run_losses(Trainer& t, int64_t until, ThreadPool& pool, const std::string& ckpt = "",
                              int64_t every = 0) {
  std::vector<float> losses;
  LoopOptions loop;
  loop.until_step = until;
  loop.checkpoint_path = ckpt;
  loop.checkpoint_every = every;
  loop.eval_every = 3;  // evaluation between steps must not disturb training
  run_training(t, loop, {.on_step = [&](const StepStats& s) { losses.push_back(s.loss); }, .on_eval = {}, .on_checkpoint = {}}, pool);
  return losses;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    EXPECT_EQ(x, y) << "step " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(Trainer, ResumeRepeatsEveryLossBitForBit) {
  constexpr int64_t K = 20, k = 7;
  ThreadPool pool(2);
  const TokenStream train = rule_stream(1, 500), val = rule_stream(2, 100);
  Trainer full(tiny_options(K), tiny_vocab(), train, val);
  const std::vector<float> reference = run_losses(full, K, pool);

  // A run that checkpoints at k (and every 2 steps before it), then "dies".
  const std::string ckpt = temp_path("train_test_resume.safetensors");
  Trainer first(tiny_options(K), tiny_vocab(), train, val);
  std::vector<float> losses = run_losses(first, k, pool, ckpt, 2);
  ASSERT_EQ(losses.size(), static_cast<size_t>(k));

  // A new process would regenerate the streams from the options; these are the same.
  TrainCheckpoint c = load_checkpoint(ckpt);
  EXPECT_EQ(c.step, k);
  EXPECT_EQ(c.windows_drawn, static_cast<uint64_t>(k * 8));
  Trainer resumed(std::move(c), train, val);
  EXPECT_EQ(resumed.step(), k);
  const std::vector<float> rest = run_losses(resumed, K, pool);
  losses.insert(losses.end(), rest.begin(), rest.end());
  expect_bitwise_equal(losses, reference);

  // The final weights agree bit for bit too.
  const auto a = full.model().weights().named(), b = resumed.model().weights().named();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(a[i].second->data(), b[i].second->data(), a[i].second->nbytes()), 0) << a[i].first;
  fs::remove(ckpt);
}

TEST(Trainer, SameSeedSameLossesAndResumeRejectsAnotherCorpus) {
  ThreadPool pool(2);
  const TokenStream train = rule_stream(1, 500);
  Trainer a(tiny_options(6), tiny_vocab(), train, nullptr);
  Trainer b(tiny_options(6), tiny_vocab(), train, nullptr);
  expect_bitwise_equal(run_losses(a, 6, pool), run_losses(b, 6, pool));
  EXPECT_FALSE(a.evaluate(pool).has_value());
  EXPECT_ERROR(a.train_step(pool), "train: all 6 steps are done");  // all steps done

  TrainCheckpoint c = a.checkpoint();
  EXPECT_ERROR(Trainer(c, rule_stream(3, 500), nullptr), "resume: the training corpus differs from the checkpoint's");
}

TEST(Checkpoint, AnInterruptedSaveLeavesThePreviousOneLoadable) {
  ThreadPool pool(1);
  Trainer t(tiny_options(4), tiny_vocab(), rule_stream(1, 300), nullptr);
  const std::string ckpt = temp_path("train_test_atomic.safetensors");
  run_losses(t, 2, pool, ckpt, 1);
  {
    // A save killed before its rename: the temporary holds half a file and is never published.
    io::AtomicFileWriter w(ckpt);
    const std::string garbage(1000, 'x');
    w.write(garbage);
  }
  const TrainCheckpoint c = load_checkpoint(ckpt);
  EXPECT_EQ(c.step, 2);
  // A truncated file (what a non-atomic writer could leave) is rejected with an Error.
  {
    const auto size = fs::file_size(ckpt);
    fs::resize_file(ckpt, size / 2);
    EXPECT_ERROR(load_checkpoint(ckpt), "train_test_atomic.safetensors");
  }
  fs::remove(ckpt);
}

TEST(Progress, PlainLinesWhenNotATerminal) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    ProgressDisplay p(out, false, 0, 4, 100, 2);
    for (int64_t i = 0; i < 4; ++i) p.step(StepStats{i, 2.0f - 0.1f * i, 1e-3f, 0.5, 0.01});
    p.eval(4, 1.5f);
    p.finish();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("step 1/4"), std::string::npos) << text;
  EXPECT_NE(text.find("step 4/4  loss 1.7500"), std::string::npos) << text;  // mean of steps 3, 4
  EXPECT_NE(text.find("val loss 1.5000"), std::string::npos) << text;
  EXPECT_EQ(format_duration(3725), "1:02:05");
}

}  // namespace
}  // namespace minigpt
