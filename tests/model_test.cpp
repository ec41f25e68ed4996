// Tests of model/: GrammarMiniGPT forward against an independent double-precision reference
// written here, the whole-model backward against central finite differences, KV-cache decode
// against the full forward, input validation, and the sampler.
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace minigpt {
namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.block_size = 8;
  c.vocab_size = 11;
  return c;
}

ModelConfig small_config() {
  ModelConfig c;  // the shipped architecture, smaller vocabulary
  c.vocab_size = 50;
  c.block_size = 24;
  return c;
}

// init_random gives zero biases and unit LayerNorm gains, whose gradients would then be
// checked only at one special point; perturb every tensor so every path carries signal.
ModelWeights perturbed_weights(const ModelConfig& c, uint64_t seed, float scale) {
  ModelWeights w = ModelWeights::init_random(c, seed);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& [name, t] : w.named()) {
    const bool is_ln = name.find("ln") != std::string::npos && name.find("lm_head") == std::string::npos;
    for (float& x : t->span()) {
      if (is_ln && name.ends_with(".weight")) x = 1.0f + 0.3f * normal(rng);
      else if (name.ends_with(".bias")) x = 0.1f * normal(rng);
      else x *= scale;
    }
  }
  return w;
}

std::vector<int32_t> random_ids(int64_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  return ids;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return NAN;
    m = std::max(m, d);
  }
  return m;
}

// ---- an independent reference forward, plain loops in double --------------------------------

using Vec = std::vector<double>;

Vec ref_linear(const Vec& x, const Tensor& W, const Tensor& b, int64_t N, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.span()[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(n * in + i)] * W.span()[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(n * out + o)] = s;
    }
  return y;
}

Vec ref_layernorm(const Vec& x, const Tensor& w, const Tensor& b, int64_t N, int64_t C, double eps) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += x[static_cast<size_t>(n * C + i)];
    m /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) v += std::pow(x[static_cast<size_t>(n * C + i)] - m, 2);
    v /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i)
      y[static_cast<size_t>(n * C + i)] = (x[static_cast<size_t>(n * C + i)] - m) / std::sqrt(v + eps) * w.span()[static_cast<size_t>(i)] + b.span()[static_cast<size_t>(i)];
  }
  return y;
}

// logits (B*T, V) in double.
Vec reference_forward(const ModelConfig& c, const ModelWeights& w, const std::vector<int32_t>& ids,
                      int64_t B, int64_t T) {
  const int64_t d = c.d_model, N = B * T, H = c.n_head, dh = c.head_dim(), F = c.d_ff();
  Vec x(static_cast<size_t>(N * d));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < d; ++i)
      x[static_cast<size_t>(n * d + i)] = w.wte.span()[static_cast<size_t>(ids[static_cast<size_t>(n)] * d + i)] +
                                          w.wpe.span()[static_cast<size_t>((n % T) * d + i)];
  for (const BlockWeights& bw : w.blocks) {
    Vec h = ref_layernorm(x, bw.ln1_weight, bw.ln1_bias, N, d, c.layernorm_eps);
    Vec qkv = ref_linear(h, bw.qkv_weight, bw.qkv_bias, N, d, 3 * d);
    Vec att(static_cast<size_t>(N * d), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t t1 = 0; t1 < T; ++t1) {
          auto q = [&](int64_t i) { return qkv[static_cast<size_t>((b * T + t1) * 3 * d + hh * dh + i)]; };
          Vec s(static_cast<size_t>(t1 + 1));
          double mx = -INFINITY, z = 0;
          for (int64_t t2 = 0; t2 <= t1; ++t2) {
            double dot = 0;
            for (int64_t i = 0; i < dh; ++i) dot += q(i) * qkv[static_cast<size_t>((b * T + t2) * 3 * d + d + hh * dh + i)];
            s[static_cast<size_t>(t2)] = dot / std::sqrt(static_cast<double>(dh));
            mx = std::max(mx, s[static_cast<size_t>(t2)]);
          }
          for (auto& v : s) z += (v = std::exp(v - mx));
          for (int64_t t2 = 0; t2 <= t1; ++t2)
            for (int64_t i = 0; i < dh; ++i)
              att[static_cast<size_t>((b * T + t1) * d + hh * dh + i)] +=
                  s[static_cast<size_t>(t2)] / z * qkv[static_cast<size_t>((b * T + t2) * 3 * d + 2 * d + hh * dh + i)];
        }
    Vec p = ref_linear(att, bw.proj_weight, bw.proj_bias, N, d, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += p[i];
    h = ref_layernorm(x, bw.ln2_weight, bw.ln2_bias, N, d, c.layernorm_eps);
    Vec f = ref_linear(h, bw.fc1_weight, bw.fc1_bias, N, d, F);
    for (auto& v : f) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    p = ref_linear(f, bw.fc2_weight, bw.fc2_bias, N, F, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += p[i];
  }
  Vec h = ref_layernorm(x, w.ln_f_weight, w.ln_f_bias, N, d, c.layernorm_eps);
  return ref_linear(h, w.lm_head_weight, w.lm_head_bias, N, d, c.vocab_size);
}

// ---- forward -------------------------------------------------------------------------------

TEST(ModelForward, MatchesDoubleReferenceAndSoftmax) {
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 42, 3.0f));
  const int64_t B = 2, T = 16, V = c.vocab_size;
  const auto ids = random_ids(B * T, c.vocab_size, 42);
  ThreadPool pool(1);
  Tensor logits, probs;
  model.forward(ids.data(), B, T, logits, probs, pool);
  ASSERT_EQ(logits.shape(), (Shape{B, T, V}));
  ASSERT_EQ(probs.shape(), (Shape{B, T, V}));

  const Vec ref = reference_forward(c, model.weights(), ids, B, T);
  double max_diff = 0, max_prob_diff = 0;
  for (int64_t n = 0; n < B * T; ++n) {
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, ref[static_cast<size_t>(n * V + v)]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(ref[static_cast<size_t>(n * V + v)] - mx);
    for (int64_t v = 0; v < V; ++v) {
      const size_t i = static_cast<size_t>(n * V + v);
      max_diff = std::max(max_diff, std::fabs(logits.span()[i] - ref[i]));
      max_prob_diff = std::max(max_prob_diff, std::fabs(probs.span()[i] - std::exp(ref[i] - mx) / z));
    }
  }
  std::printf("forward vs double reference: max |logit diff| %.3g, max |prob diff| %.3g\n", max_diff, max_prob_diff);
  EXPECT_LE(max_diff, 1e-5);
  EXPECT_LE(max_prob_diff, 1e-6);
}

TEST(ModelForward, TraceHoldsEveryLayer) {
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 7, 1.0f));
  const int64_t B = 2, T = 5;
  const auto ids = random_ids(B * T, c.vocab_size, 3);
  ThreadPool pool(1);
  Tensor logits, probs;
  ForwardTrace trace;
  model.forward(ids.data(), B, T, logits, probs, pool, &trace);
  EXPECT_EQ(trace.embed.shape(), (Shape{B, T, c.d_model}));
  ASSERT_EQ(static_cast<int>(trace.blocks.size()), c.n_layer);
  for (const Tensor& t : trace.blocks) EXPECT_EQ(t.shape(), (Shape{B, T, c.d_model}));
  EXPECT_EQ(trace.ln_f.shape(), (Shape{B, T, c.d_model}));
  // logits = lm_head(ln_f): the returned logits against a double-precision product of the
  // trace's ln_f and the head's weights (a trace that copied the wrong layer, or logits that
  // skipped the head's bias, fail here; float sums of d = 64 products: well inside 1e-5).
  ASSERT_EQ(logits.shape(), (Shape{B, T, c.vocab_size}));
  std::vector<float> head(static_cast<size_t>(B * T * c.vocab_size));
  cpu::linear_reference(trace.ln_f.data(), model.weights().lm_head_weight.data(),
                        model.weights().lm_head_bias.data(), head.data(), B * T, c.d_model, c.vocab_size);
  for (size_t i = 0; i < head.size(); ++i)
    ASSERT_NEAR(logits.data()[i], head[i], 1e-5 + 1e-5 * std::fabs(head[i])) << "logit " << i;
  EXPECT_EQ(trace.logits.shape(), logits.shape());
  // embed = wte[id] + wpe[t], exactly
  const int64_t d = c.d_model;
  EXPECT_EQ(trace.embed.at({1, 3, 5}), model.weights().wte.at({ids[8], 5}) + model.weights().wpe.at({3, 5}));
  (void)d;
  // the blocks really are different layers
  EXPECT_GT(max_abs_diff(trace.blocks[0].span(), trace.blocks[1].span()), 1e-4f);
}

TEST(ModelForward, EmptyBatchGivesEmptyOutputs) {
  const ModelConfig c = tiny_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 1));
  ThreadPool pool(1);
  Tensor logits, probs;
  model.forward(nullptr, 0, 4, logits, probs, pool);
  EXPECT_EQ(logits.shape(), (Shape{0, 4, c.vocab_size}));
  EXPECT_EQ(probs.numel(), 0);
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an Error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelForward, RejectsBadInput) {
  const ModelConfig c = tiny_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 1));
  ThreadPool pool(1);
  Tensor logits, probs;
  std::vector<int32_t> ids = {1, 2, 3, 11};
  expect_error([&] { model.forward(ids.data(), 1, 4, logits, probs, pool); }, "token id 11");
  ids[3] = -1;
  expect_error([&] { model.forward(ids.data(), 1, 4, logits, probs, pool); }, "token id -1");
  std::vector<int32_t> long_ids(9, 1);
  expect_error([&] { model.forward(long_ids.data(), 1, 9, logits, probs, pool); }, "block_size 8");
  expect_error([&] { model.forward(long_ids.data(), 1, 0, logits, probs, pool); }, "sequence length");
  std::vector<int32_t> targets(4, 11);
  ids[3] = 0;
  expect_error([&] { model.forward_train(ids.data(), targets.data(), 1, 4, pool); }, "target 11");
  ModelWeights grads = ModelWeights::zeros_like(c);
  expect_error([&] { model.backward(grads, pool); }, "forward_train");
  ModelConfig wrong = c;
  wrong.d_model = 32;
  expect_error([&] { GrammarMiniGPT bad(wrong, ModelWeights::init_random(c, 1)); }, "wte.weight");
}

TEST(ModelForward, DeterministicAcrossRunsAndThreadCounts) {
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 5, 2.0f));
  const int64_t B = 3, T = 16;
  const auto ids = random_ids(B * T, c.vocab_size, 9);
  ThreadPool one(1), two(2);
  Tensor l1, p1, l1b, p1b, l2, p2;
  model.forward(ids.data(), B, T, l1, p1, one);
  model.forward(ids.data(), B, T, l1b, p1b, one);
  model.forward(ids.data(), B, T, l2, p2, two);
  EXPECT_EQ(max_abs_diff(l1.span(), l1b.span()), 0.0f) << "same thread count must be bit-identical";
  const float across = max_abs_diff(l1.span(), l2.span());
  std::printf("logits, 1 vs 2 threads: max |diff| %.3g\n", across);
  EXPECT_LE(across, 1e-6f);
}

// forward caches packed Linear weights and scratch: after a write through weights() (as the
// trainer's optimiser step does) and after a change of (B, T), a forward must give exactly
// what a fresh model with those weights gives.
TEST(ModelForward, InferenceCacheFollowsWeightWritesAndShapes) {
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 7, 2.0f));
  const auto ids = random_ids(2 * 16, c.vocab_size, 3);
  ThreadPool pool(1);
  Tensor l0, p0;
  model.forward(ids.data(), 2, 16, l0, p0, pool);
  {
    GrammarMiniGPT fresh(c, model.weights().clone());
    Tensor lf, pf;
    fresh.forward(ids.data(), 2, 16, lf, pf, pool);
    EXPECT_EQ(max_abs_diff(l0.span(), lf.span()), 0.0f);
  }
  // write every Linear weight (and lm_head) through weights()
  ModelWeights& w = model.weights();
  for (auto& [name, t] : w.named())
    if (name.ends_with("_weight") || name.ends_with(".weight"))
      for (float& x : t->span()) x *= -1.25f;
  Tensor l1, p1;
  model.forward(ids.data(), 2, 16, l1, p1, pool);
  GrammarMiniGPT fresh(c, model.weights().clone());
  Tensor lf, pf;
  fresh.forward(ids.data(), 2, 16, lf, pf, pool);
  EXPECT_GT(max_abs_diff(l0.span(), l1.span()), 1e-3f) << "the weight write must change the logits";
  EXPECT_EQ(max_abs_diff(l1.span(), lf.span()), 0.0f) << "forward used stale packed weights";
  // another shape, then back: the scratch is reallocated, results unchanged
  Tensor ls, ps;
  model.forward(ids.data(), 1, 5, ls, ps, pool);
  Tensor lfs, pfs;
  fresh.forward(ids.data(), 1, 5, lfs, pfs, pool);
  EXPECT_EQ(max_abs_diff(ls.span(), lfs.span()), 0.0f);
  Tensor l2, p2;
  model.forward(ids.data(), 2, 16, l2, p2, pool);
  EXPECT_EQ(max_abs_diff(l2.span(), lf.span()), 0.0f);
  EXPECT_EQ(max_abs_diff(p2.span(), pf.span()), 0.0f);
}

// ---- backward ------------------------------------------------------------------------------

TEST(ModelBackward, LossMatchesForwardCrossEntropy) {
  const ModelConfig c = tiny_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 11, 5.0f));
  const int64_t B = 2, T = 5, V = c.vocab_size;
  const auto ids = random_ids(B * T, c.vocab_size, 1);
  auto targets = random_ids(B * T, c.vocab_size, 2);
  targets[3] = -1;
  ThreadPool pool(1);
  const float loss = model.forward_train(ids.data(), targets.data(), B, T, pool);
  const Vec ref = reference_forward(c, model.weights(), ids, B, T);
  double sum = 0;
  int count = 0;
  for (int64_t n = 0; n < B * T; ++n) {
    if (targets[static_cast<size_t>(n)] < 0) continue;
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, ref[static_cast<size_t>(n * V + v)]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(ref[static_cast<size_t>(n * V + v)] - mx);
    sum += std::log(z) + mx - ref[static_cast<size_t>(n * V + targets[static_cast<size_t>(n)])];
    ++count;
  }
  EXPECT_NEAR(loss, sum / count, 1e-5);
  // a second forward_train of the same shape reuses the state and gives the same loss
  EXPECT_EQ(model.forward_train(ids.data(), targets.data(), B, T, pool), loss);
}

// Every parameter tensor, every entry: the analytic gradient g against central differences of
// the loss L, two ways.
//   - Along a random direction v (+-1 in every entry of the tensor): (L(w + h v) - L(w - h v)) / 2h
//     against <g, v>. One check covers every entry: an entry whose gradient is wrong by delta
//     moves <g, v> by delta, so the bound below catches any error above ~1% of |<g, v>|.
//   - Entry by entry, 16 sampled entries per tensor (the used rows of wte): a wrong sign or
//     scale of one entry that the direction could average away.
// Bounds: measured worst relative errors 0.0065 (entries, qkv) and 0.0101 (the wte direction,
// where every entry moves at once) at h = 1e-2 (float forward: L's rounding ~4e-7 / 2h = 2e-5
// absolute; truncation O(h^2)); the bounds are about 3x those: 2e-2 and 3e-2. (A step of h/4
// along the directions trades truncation for rounding: 0.0135 at ln2.weight.)
TEST(ModelBackward, MatchesFiniteDifferencesForEveryTensor) {
  const ModelConfig c = tiny_config();
  // Larger weights than init (std 0.1) so every gradient is well above float noise.
  GrammarMiniGPT model(c, perturbed_weights(c, 3, 5.0f));
  const int64_t B = 2, T = 5;
  const auto ids = random_ids(B * T, c.vocab_size, 21);
  auto targets = random_ids(B * T, c.vocab_size, 22);
  targets[4] = -1;  // an ignored position
  ThreadPool pool(1);

  ModelWeights grads = ModelWeights::zeros_like(c);
  model.forward_train(ids.data(), targets.data(), B, T, pool);
  model.backward(grads, pool);

  const float h = 1e-2f;
  std::mt19937_64 rng(99);
  auto grad_slots = grads.named();
  auto param_slots = model.weights().named();
  double worst = 0, worst_dir = 0;
  std::string worst_name, worst_dir_name;
  int checked = 0;
  // (L(w + h d) - L(w - h d)) / 2h for a perturbation d of `param` (entry i moves by h d[i]).
  auto central = [&](Tensor& param, const std::vector<float>& d) {
    const std::vector<float> saved(param.span().begin(), param.span().end());
    for (size_t i = 0; i < d.size(); ++i) param.data()[i] = saved[i] + h * d[i];
    const double lp = model.forward_train(ids.data(), targets.data(), B, T, pool);
    for (size_t i = 0; i < d.size(); ++i) param.data()[i] = saved[i] - h * d[i];
    const double lm = model.forward_train(ids.data(), targets.data(), B, T, pool);
    std::copy(saved.begin(), saved.end(), param.data());
    return (lp - lm) / (2.0 * h);
  };
  for (size_t p = 0; p < param_slots.size(); ++p) {
    Tensor& param = *param_slots[p].second;
    const Tensor& grad = *grad_slots[p].second;
    const std::string& name = param_slots[p].first;
    const int64_t n = param.numel();
    // Every entry at once, along a random +-1 direction.
    std::vector<float> dir(static_cast<size_t>(n));
    double analytic_dir = 0;
    for (int64_t i = 0; i < n; ++i) {
      dir[static_cast<size_t>(i)] = rng() % 2 ? 1.0f : -1.0f;
      analytic_dir += static_cast<double>(grad.data()[i]) * dir[static_cast<size_t>(i)];
    }
    const double numeric_dir = central(param, dir);
    const double err_dir = std::fabs(numeric_dir - analytic_dir) / (1e-3 + std::fabs(numeric_dir));
    EXPECT_LE(err_dir, 3e-2) << name << " along a random direction: analytic " << analytic_dir
                             << " numeric " << numeric_dir;
    if (err_dir > worst_dir) worst_dir = err_dir, worst_dir_name = name;
    // Entry by entry; embedding rows of tokens that never occur have zero gradient: sample used
    // rows for wte.
    for (int k = 0; k < 16; ++k) {
      int64_t idx = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      if (name == "wte.weight") idx = ids[rng() % ids.size()] * c.d_model + idx % c.d_model;
      std::vector<float> one(static_cast<size_t>(n), 0.0f);
      one[static_cast<size_t>(idx)] = 1.0f;
      const double numeric = central(param, one);
      const double analytic = grad.data()[idx];
      const double err = std::fabs(numeric - analytic) / (1e-3 + std::fabs(numeric));
      EXPECT_LE(err, 2e-2) << name << "[" << idx << "]: analytic " << analytic << " numeric " << numeric;
      if (err > worst) worst = err, worst_name = name;
      ++checked;
    }
  }
  std::printf("finite differences: %d entries over %zu tensors, worst relative error %.3g (%s); "
              "every tensor along a random direction, worst %.3g (%s)\n",
              checked, param_slots.size(), worst, worst_name.c_str(), worst_dir, worst_dir_name.c_str());
}

TEST(ModelBackward, AccumulatesIntoGrads) {
  const ModelConfig c = tiny_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 4, 3.0f));
  const auto ids = random_ids(10, c.vocab_size, 1);
  const auto targets = random_ids(10, c.vocab_size, 2);
  ThreadPool pool(1);
  ModelWeights once = ModelWeights::zeros_like(c), twice = ModelWeights::zeros_like(c);
  model.forward_train(ids.data(), targets.data(), 2, 5, pool);
  model.backward(once, pool);
  for (int k = 0; k < 2; ++k) {
    model.forward_train(ids.data(), targets.data(), 2, 5, pool);
    model.backward(twice, pool);
  }
  auto a = once.named();
  auto b = twice.named();
  for (size_t p = 0; p < a.size(); ++p) {
    for (int64_t i = 0; i < a[p].second->numel(); ++i) {
      ASSERT_NEAR(2.0f * a[p].second->data()[i], b[p].second->data()[i],
                  1e-6f + 1e-5f * std::fabs(b[p].second->data()[i])) << a[p].first;
    }
  }
}

// ---- KV-cache decode -------------------------------------------------------------------------

TEST(Decoder, MatchesFullForwardAtEveryPosition) {
  const ModelConfig c = small_config();
  GrammarMiniGPT model(c, perturbed_weights(c, 13, 2.0f));
  const int64_t T = c.block_size, V = c.vocab_size;
  const auto ids = random_ids(T, c.vocab_size, 77);
  ThreadPool pool(1);
  Tensor logits, probs;
  model.forward(ids.data(), 1, T, logits, probs, pool);

  Decoder dec(model);
  float worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    auto step = dec.step(ids[static_cast<size_t>(t)], pool);
    worst = std::max(worst, max_abs_diff(step, logits.span().subspan(static_cast<size_t>(t * V), static_cast<size_t>(V))));
  }
  std::printf("KV decode vs full forward over %lld positions: max |diff| %.3g\n", static_cast<long long>(T), worst);
  EXPECT_LE(worst, 1e-5f);
  EXPECT_EQ(dec.position(), T);
  expect_error([&] { dec.step(1, pool); }, "context is full");
  EXPECT_EQ(dec.position(), T);

  // prefill a prefix, then step: the same logits again
  dec.reset();
  auto pre = dec.prefill(std::span<const int32_t>(ids.data(), 6), pool);
  EXPECT_LE(max_abs_diff(pre, logits.span().subspan(5 * static_cast<size_t>(V), static_cast<size_t>(V))), 1e-5f);
  auto next = dec.step(ids[6], pool);
  EXPECT_LE(max_abs_diff(next, logits.span().subspan(6 * static_cast<size_t>(V), static_cast<size_t>(V))), 1e-5f);
}

TEST(Decoder, RejectsBadTokensAndOverlongPrompts) {
  const ModelConfig c = tiny_config();
  GrammarMiniGPT model(c, ModelWeights::init_random(c, 1));
  ThreadPool pool(1);
  Decoder dec(model);
  expect_error([&] { dec.step(11, pool); }, "token id 11");
  std::vector<int32_t> too_long(9, 1);
  expect_error([&] { dec.prefill(too_long, pool); }, "does not fit");
  EXPECT_EQ(dec.position(), 0);
  expect_error([&] { dec.prefill({}, pool); }, "at least one token");
}

// ---- sampling ------------------------------------------------------------------------------

TEST(Sampling, GreedyTopKAndSeeds) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f};
  Sampler s(1);
  EXPECT_EQ(s.sample(logits, {0.0f, 0}), 1);  // greedy, tie to the lower id
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, {1.0f, 1}), 1);
  for (int i = 0; i < 200; ++i) {
    const int32_t id = s.sample(logits, {1.0f, 3});
    EXPECT_TRUE(id == 1 || id == 3 || id == 4) << id;
  }
  Sampler a(123), b(123);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits, {0.8f, 0}), b.sample(logits, {0.8f, 0}));
  expect_error([&] { s.sample(logits, {-1.0f, 0}); }, "temperature");
  expect_error([&] { s.sample(logits, {1.0f, -2}); }, "top-k");
}

TEST(Sampling, FrequenciesFollowSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  const float temp = 0.7f;
  Sampler s(2024);
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits, {temp, 0}))];
  double z = 0;
  for (float l : logits) z += std::exp(l / temp);
  for (size_t i = 0; i < 4; ++i) {
    const double p = std::exp(logits[i] / temp) / z;
    // 5 standard deviations of a binomial count
    EXPECT_NEAR(counts[i], n * p, 5.0 * std::sqrt(n * p * (1 - p))) << "token " << i;
  }
}

}  // namespace
}  // namespace minigpt
