// GrammarMiniGPT: forward (inference, with an optional per-layer trace), forward_train (saves
// activations into a TrainState reused across steps of the same (B, T)) and backward.
//
// Every op is a call into kernels/cpu; this file only owns the wiring (which buffer feeds
// which kernel, the residual adds and the embedding gather/scatter). It does not do KV-cache
// decoding (model/decoder.cpp) or sampling (model/sampling.cpp).
#include "model/gpt.h"

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

namespace minigpt {

namespace {

// One block's activations, N = B*T rows, row-major. In training every block owns its own
// tensors (the backward reads them all); at inference every block shares one set, and the
// residual tensors (in, mid, out) are the same buffer, updated in place.
struct BlockActs {
  Tensor in;                        // (N, d) residual stream entering the block
  Tensor ln1, ln1_mean, ln1_rstd;   // (N, d), (N), (N)
  Tensor qkv;                       // (N, 3d)
  Tensor att;                       // (B, NH, T, T) attention probabilities
  Tensor att_out;                   // (N, d) heads concatenated, before proj
  Tensor mid;                       // (N, d) residual after the attention half
  Tensor ln2, ln2_mean, ln2_rstd;   // (N, d), (N), (N)
  Tensor gelu;                      // (N, 4d) GELU(fc1(ln2))
  Tensor gelu_grad;                 // (N, 4d) GELU' at fc1's output (training only)
  Tensor out;                       // (N, d) residual after the block
};
// proj's and fc2's outputs go straight into mid and out: the residual add is fused into the
// Linear's store (cpu::LinearEpilogue); so is the GELU into fc1's, which also saves GELU' for
// the backward (fc1's pre-activation itself is never stored).

struct Activations {
  int64_t B = 0, T = 0;
  std::vector<BlockActs> blocks;
  Tensor lnf, lnf_mean, lnf_rstd;  // (N, d), (N), (N)
};

float* ptr(Tensor& t) { return t.defined() ? t.data() : nullptr; }

// Training: every tensor distinct, block l's input is block l-1's output.
Activations allocate_train(const ModelConfig& c, int64_t B, int64_t T) {
  const int64_t N = B * T, d = c.d_model, F = c.d_ff();
  Activations a;
  a.B = B;
  a.T = T;
  Tensor in = Tensor::empty({N, d});  // the embedding output
  for (int l = 0; l < c.n_layer; ++l) {
    BlockActs b;
    b.in = in;
    b.ln1 = Tensor::empty({N, d});
    b.ln1_mean = Tensor::empty({N});
    b.ln1_rstd = Tensor::empty({N});
    b.qkv = Tensor::empty({N, 3 * d});
    b.att = Tensor::empty({B, c.n_head, T, T});
    b.att_out = Tensor::empty({N, d});
    b.mid = Tensor::empty({N, d});
    b.ln2 = Tensor::empty({N, d});
    b.ln2_mean = Tensor::empty({N});
    b.ln2_rstd = Tensor::empty({N});
    b.gelu = Tensor::empty({N, F});
    b.gelu_grad = Tensor::empty({N, F});
    b.out = Tensor::empty({N, d});
    in = b.out;
    a.blocks.push_back(std::move(b));
  }
  a.lnf = Tensor::empty({N, d});
  a.lnf_mean = Tensor::empty({N});
  a.lnf_rstd = Tensor::empty({N});
  return a;
}

// Inference: one residual buffer updated in place, one set of per-block scratch shared by
// all blocks, no LayerNorm statistics, no attention probabilities.
Activations allocate_inference(const ModelConfig& c, int64_t B, int64_t T) {
  const int64_t N = B * T, d = c.d_model, F = c.d_ff();
  BlockActs b;
  b.in = b.mid = b.out = Tensor::empty({N, d});
  b.ln1 = b.ln2 = b.att_out = Tensor::empty({N, d});  // each is dead before the next is written
  b.qkv = Tensor::empty({N, 3 * d});
  // no att, no gelu_grad: only the backward reads them
  b.gelu = Tensor::empty({N, F});
  Activations a;
  a.B = B;
  a.T = T;
  a.blocks.assign(static_cast<size_t>(c.n_layer), b);
  a.lnf = b.ln1;  // free once the last block is done
  return a;
}

void check_ids(const int32_t* ids, int64_t B, int64_t T, const ModelConfig& c) {
  MINIGPT_CHECK(B >= 0, "batch size must be >= 0, got {}", B);
  MINIGPT_CHECK(T >= 1, "sequence length must be >= 1, got {}", T);
  MINIGPT_CHECK(T <= c.block_size, "sequence length {} exceeds the model's block_size {}", T,
                c.block_size);
  MINIGPT_CHECK(B == 0 || ids != nullptr, "token ids are null");
  for (int64_t i = 0; i < B * T; ++i) {
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size,
                  "token id {} at (batch {}, position {}) is outside the vocabulary [0, {})",
                  ids[i], i / T, i % T, c.vocab_size);
  }
}

// x (N, d) = wte[ids] + wpe[t]
void embed(const int32_t* ids, int64_t B, int64_t T, const ModelWeights& w, int64_t d, float* x) {
  const float* wte = w.wte.data();
  const float* wpe = w.wpe.data();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* te = wte + static_cast<int64_t>(ids[b * T + t]) * d;
      const float* pe = wpe + t * d;
      float* row = x + (b * T + t) * d;
      for (int64_t i = 0; i < d; ++i) row[i] = te[i] + pe[i];
    }
  }
}

// out = in + delta, elementwise over n floats (out may alias in); chunks of >= 2^15 floats.
void residual_add(const float* in, const float* delta, float* out, int64_t n, ThreadPool& pool) {
  pool.parallel_for(
      n, [&](int64_t i0, int64_t i1) { for (int64_t i = i0; i < i1; ++i) out[i] = in[i] + delta[i]; },
      int64_t{1} << 15);
}

// Every Linear's weights packed by cpu::linear_pack_weights (inference only): per block
// qkv, proj, fc1, fc2, then lm_head.
struct PackedLinears {
  std::vector<std::array<Tensor, 4>> blocks;
  Tensor lm_head;
};

Tensor pack(const Tensor& W) {  // W (out, in)
  const int64_t out = W.shape()[0], in = W.shape()[1];
  Tensor p = Tensor::empty({cpu::linear_packed_floats(in, out)});
  cpu::linear_pack_weights(W.data(), p.data(), in, out);
  return p;
}

PackedLinears pack_all(const ModelWeights& w) {
  PackedLinears p;
  for (const BlockWeights& bw : w.blocks)
    p.blocks.push_back({pack(bw.qkv_weight), pack(bw.proj_weight), pack(bw.fc1_weight),
                        pack(bw.fc2_weight)});
  p.lm_head = pack(w.lm_head_weight);
  return p;
}

// y (N, out) = x W^T + b, then the epilogue (residual add, GELU); from the packed weights
// when there are some (bitwise the same).
void linear(const float* x, const Tensor& W, const Tensor& b, const Tensor* packed, float* y,
            int64_t N, int64_t in, int64_t out, ThreadPool& pool,
            const cpu::LinearEpilogue& ep = {}) {
  if (packed)
    cpu::linear_forward_packed(x, W.data(), packed->data(), b.data(), y, N, in, out, pool, ep);
  else
    cpu::linear_forward(x, W.data(), b.data(), y, N, in, out, pool, ep);
}

// The forward from embeddings to logits (N, V) over prepared activations. Saves LayerNorm
// statistics where the activations hold tensors for them.
// packed: null in training (every Linear packs W per call), else pack_all(w).
void run_forward(const ModelConfig& c, const ModelWeights& w, const PackedLinears* packed,
                 const int32_t* ids, Activations& a, float* logits, ThreadPool& pool,
                 ForwardTrace* trace) {
  const int64_t B = a.B, T = a.T, N = B * T, d = c.d_model, F = c.d_ff(), V = c.vocab_size;
  const float eps = c.layernorm_eps;
  embed(ids, B, T, w, d, a.blocks[0].in.data());
  if (trace) trace->embed = a.blocks[0].in.clone().view({B, T, d});
  if (trace) trace->blocks.clear();

  for (int l = 0; l < c.n_layer; ++l) {
    const BlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    BlockActs& b = a.blocks[static_cast<size_t>(l)];
    const std::array<Tensor, 4>* pk = packed ? &packed->blocks[static_cast<size_t>(l)] : nullptr;
    // attention half: mid = in + proj(attention(ln1(in)))
    cpu::layernorm_forward(b.in.data(), bw.ln1_weight.data(), bw.ln1_bias.data(), b.ln1.data(),
                           ptr(b.ln1_mean), ptr(b.ln1_rstd), N, d, eps, pool);
    linear(b.ln1.data(), bw.qkv_weight, bw.qkv_bias, pk ? &(*pk)[0] : nullptr, b.qkv.data(), N,
           d, 3 * d, pool);
    cpu::attention_forward(b.qkv.data(), b.att_out.data(), ptr(b.att), B, T, d, c.n_head, pool);
    linear(b.att_out.data(), bw.proj_weight, bw.proj_bias, pk ? &(*pk)[1] : nullptr,
           b.mid.data(), N, d, d, pool, {.residual = b.in.data()});
    // MLP half: out = mid + fc2(gelu(fc1(ln2(mid))))
    cpu::layernorm_forward(b.mid.data(), bw.ln2_weight.data(), bw.ln2_bias.data(), b.ln2.data(),
                           ptr(b.ln2_mean), ptr(b.ln2_rstd), N, d, eps, pool);
    linear(b.ln2.data(), bw.fc1_weight, bw.fc1_bias, pk ? &(*pk)[2] : nullptr, b.gelu.data(),
           N, d, F, pool, {.gelu = true, .gelu_grad = ptr(b.gelu_grad)});
    linear(b.gelu.data(), bw.fc2_weight, bw.fc2_bias, pk ? &(*pk)[3] : nullptr, b.out.data(),
           N, F, d, pool, {.residual = b.mid.data()});
    if (trace) trace->blocks.push_back(b.out.clone().view({B, T, d}));
  }

  BlockActs& last = a.blocks.back();
  cpu::layernorm_forward(last.out.data(), w.ln_f_weight.data(), w.ln_f_bias.data(), a.lnf.data(),
                         ptr(a.lnf_mean), ptr(a.lnf_rstd), N, d, eps, pool);
  if (trace) trace->ln_f = a.lnf.clone().view({B, T, d});
  linear(a.lnf.data(), w.lm_head_weight, w.lm_head_bias, packed ? &packed->lm_head : nullptr,
         logits, N, d, V, pool);
}

void ensure_shape(Tensor& t, const Shape& shape) {
  if (!t.defined() || t.shape() != shape || !t.is_contiguous() || t.device() != Device::CPU) {
    t = Tensor::empty(shape);
  }
}

}  // namespace

// Saved activations of the last forward_train and the backward's scratch, allocated once per
// (B, T) and reused while the shape stays the same.
struct TrainState {
  Activations acts;
  std::vector<int32_t> ids;  // (B, T) copy: the embedding backward scatters into these rows
  Tensor logits;             // (N, V)
  Tensor dlogits;            // (N, V) d(mean loss)/d(logits), written by forward_train
  // backward scratch
  Tensor dresid;  // (N, d) gradient of the residual stream
  Tensor dln;     // (N, d) gradient at a LayerNorm output / attention output
  Tensor dtmp;    // (N, d) LayerNorm input gradient before it joins dresid
  Tensor dqkv;    // (N, 3d)
  Tensor dfc;     // (N, 4d) gradient at fc1's output
  bool ready = false;  // a forward_train happened and its backward has not run yet

  TrainState(const ModelConfig& c, int64_t B, int64_t T)
      : acts(allocate_train(c, B, T)),
        ids(static_cast<size_t>(B * T)),
        logits(Tensor::empty({B * T, c.vocab_size})),
        dlogits(Tensor::empty({B * T, c.vocab_size})),
        dresid(Tensor::empty({B * T, c.d_model})),
        dln(Tensor::empty({B * T, c.d_model})),
        dtmp(Tensor::empty({B * T, c.d_model})),
        dqkv(Tensor::empty({B * T, 3 * static_cast<int64_t>(c.d_model)})),
        dfc(Tensor::empty({B * T, c.d_ff()})) {}
};

// Inference state kept across forward calls: the packed Linear weights (repacked when stale)
// and the scratch activations of the last (B, T). The mutex makes concurrent forwards on one
// model safe (they serialise).
struct InferenceCache {
  std::mutex mutex;
  bool stale = true;  // weights_ may have changed since `packed` was made
  PackedLinears packed;
  Activations scratch;  // allocate_inference for (scratch.B, scratch.T); B == 0: none yet
};

GrammarMiniGPT::GrammarMiniGPT(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)),
      infer_(std::make_unique<InferenceCache>()) {
  config_.validate();
  check_weights(weights_, config_);
  for (const auto& [name, t] : weights_.named()) {
    MINIGPT_CHECK(t->device() == Device::CPU && t->is_contiguous(),
                  "weight '{}' must be a contiguous CPU tensor", name);
  }
}

GrammarMiniGPT::~GrammarMiniGPT() = default;

ModelWeights& GrammarMiniGPT::weights() {
  if (infer_) infer_->stale = true;  // the caller may write through the reference
  return weights_;
}
GrammarMiniGPT::GrammarMiniGPT(GrammarMiniGPT&&) noexcept = default;
GrammarMiniGPT& GrammarMiniGPT::operator=(GrammarMiniGPT&&) noexcept = default;

void GrammarMiniGPT::forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits,
                             Tensor& probs, ThreadPool& pool, ForwardTrace* trace) const {
  check_ids(ids, B, T, config_);
  const int64_t V = config_.vocab_size, d = config_.d_model;
  ensure_shape(logits, {B, T, V});
  ensure_shape(probs, {B, T, V});
  if (B == 0) {  // empty batch: empty outputs, no kernel runs (docs/ARCHITECTURE.md)
    if (trace) {
      trace->embed = Tensor::empty({0, T, d});
      trace->blocks.assign(static_cast<size_t>(config_.n_layer), Tensor::empty({0, T, d}));
      trace->ln_f = Tensor::empty({0, T, d});
      trace->logits = Tensor::empty({0, T, V});
    }
    return;
  }
  std::lock_guard<std::mutex> lock(infer_->mutex);
  InferenceCache& cache = *infer_;
  if (cache.stale) {
    cache.packed = pack_all(weights_);
    cache.stale = false;
  }
  if (cache.scratch.B != B || cache.scratch.T != T) {
    cache.scratch = Activations{};  // free the old shape's buffers first
    cache.scratch = allocate_inference(config_, B, T);
  }
  run_forward(config_, weights_, &cache.packed, ids, cache.scratch, logits.data(), pool, trace);
  if (trace) trace->logits = logits.clone();
  cpu::softmax(logits.data(), probs.data(), B * T, V, pool);
}

float GrammarMiniGPT::forward_train(const int32_t* ids, const int32_t* targets, int64_t B,
                                    int64_t T, ThreadPool& pool) {
  check_ids(ids, B, T, config_);
  MINIGPT_CHECK(B >= 1, "forward_train needs a batch of at least one sequence");
  MINIGPT_CHECK(targets != nullptr, "targets are null");
  const int64_t N = B * T, V = config_.vocab_size;
  for (int64_t i = 0; i < N; ++i) {
    MINIGPT_CHECK(targets[i] == -1 || (targets[i] >= 0 && targets[i] < V),
                  "target {} at (batch {}, position {}) is neither -1 (ignore) nor in [0, {})",
                  targets[i], i / T, i % T, V);
  }
  if (!train_ || train_->acts.B != B || train_->acts.T != T) {
    train_.reset();  // free the old shape's buffers before allocating the new ones
    train_ = std::make_unique<TrainState>(config_, B, T);
  }
  TrainState& s = *train_;
  std::copy(ids, ids + N, s.ids.begin());
  run_forward(config_, weights_, nullptr, ids, s.acts, s.logits.data(), pool, nullptr);
  const float loss =
      cpu::cross_entropy_forward_backward(s.logits.data(), targets, s.dlogits.data(), N, V, pool);
  s.ready = true;
  return loss;
}

void GrammarMiniGPT::backward(ModelWeights& grads, ThreadPool& pool,
                              const std::function<void(int stage)>& on_ready) {
  MINIGPT_CHECK(train_ && train_->ready, "backward() needs a forward_train() first");
  check_weights(grads, config_);
  TrainState& s = *train_;
  Activations& a = s.acts;
  const ModelWeights& w = weights_;
  const int64_t B = a.B, T = a.T, N = B * T, d = config_.d_model, F = config_.d_ff(),
                V = config_.vocab_size;

  // logits = lnf @ lm_head^T + b
  cpu::linear_backward(a.lnf.data(), w.lm_head_weight.data(), s.dlogits.data(), s.dln.data(),
                       grads.lm_head_weight.data(), grads.lm_head_bias.data(), N, d, V, pool);
  // lnf = ln_f(last block's out); dresid starts here
  cpu::layernorm_backward(s.dln.data(), a.blocks.back().out.data(), w.ln_f_weight.data(),
                          a.lnf_mean.data(), a.lnf_rstd.data(), s.dresid.data(),
                          grads.ln_f_weight.data(), grads.ln_f_bias.data(), N, d, pool);
  if (on_ready) on_ready(kHeadStage);

  float* dresid = s.dresid.data();
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const BlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    BlockWeights& bg = grads.blocks[static_cast<size_t>(l)];
    BlockActs& b = a.blocks[static_cast<size_t>(l)];
    // out = mid + fc2(gelu(fc1(ln2(mid)))): dresid flows to mid unchanged, plus the MLP branch
    // d(fc1 output) = (dresid @ fc2) * GELU'(fc1 output), the product fused into the store
    cpu::linear_backward(b.gelu.data(), bw.fc2_weight.data(), dresid, s.dfc.data(),
                         bg.fc2_weight.data(), bg.fc2_bias.data(), N, F, d, pool,
                         b.gelu_grad.data());
    cpu::linear_backward(b.ln2.data(), bw.fc1_weight.data(), s.dfc.data(), s.dln.data(),
                         bg.fc1_weight.data(), bg.fc1_bias.data(), N, d, F, pool);
    cpu::layernorm_backward(s.dln.data(), b.mid.data(), bw.ln2_weight.data(), b.ln2_mean.data(),
                            b.ln2_rstd.data(), s.dtmp.data(), bg.ln2_weight.data(),
                            bg.ln2_bias.data(), N, d, pool);
    residual_add(dresid, s.dtmp.data(), dresid, N * d, pool);
    // mid = in + proj(attention(ln1(in)))
    cpu::linear_backward(b.att_out.data(), bw.proj_weight.data(), dresid, s.dln.data(),
                         bg.proj_weight.data(), bg.proj_bias.data(), N, d, d, pool);
    cpu::attention_backward(s.dln.data(), b.qkv.data(), b.att.data(), s.dqkv.data(), B, T, d,
                            config_.n_head, pool);
    cpu::linear_backward(b.ln1.data(), bw.qkv_weight.data(), s.dqkv.data(), s.dln.data(),
                         bg.qkv_weight.data(), bg.qkv_bias.data(), N, d, 3 * d, pool);
    cpu::layernorm_backward(s.dln.data(), b.in.data(), bw.ln1_weight.data(), b.ln1_mean.data(),
                            b.ln1_rstd.data(), s.dtmp.data(), bg.ln1_weight.data(),
                            bg.ln1_bias.data(), N, d, pool);
    residual_add(dresid, s.dtmp.data(), dresid, N * d, pool);
    if (on_ready) on_ready(l);
  }

  // x = wte[ids] + wpe[t]: scatter-add, serial so repeated ids accumulate in a fixed order
  float* gte = grads.wte.data();
  float* gpe = grads.wpe.data();
  for (int64_t i = 0; i < N; ++i) {
    const float* row = dresid + i * d;
    float* te = gte + static_cast<int64_t>(s.ids[static_cast<size_t>(i)]) * d;
    float* pe = gpe + (i % T) * d;
    for (int64_t j = 0; j < d; ++j) {
      te[j] += row[j];
      pe[j] += row[j];
    }
  }
  s.ready = false;
  if (on_ready) on_ready(kEmbeddingStage);
}

}  // namespace minigpt
