// Capture (capture.h): the builder API, TinyHead, and GrammarMiniGPT's forward and decode step
// written op for op against model/gpt.cpp and model/decoder.cpp.
#include "compile/capture.h"

#include "core/error.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/softmax.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

namespace minigpt::compile {

GraphBuilder::GraphBuilder(std::string name) { g_.name = std::move(name); }

int GraphBuilder::input(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.kind = TensorKind::Input;
  const int id = g_.add_tensor(std::move(t));
  g_.inputs.push_back(id);
  return id;
}

int GraphBuilder::weight(const std::string& name, std::vector<int64_t> shape) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.kind = TensorKind::Weight;
  const int id = g_.add_tensor(std::move(t));
  g_.weights.push_back(id);
  return id;
}

void GraphBuilder::output(int t, const std::string& name) {
  TensorInfo& info = g_.tensor(t);
  MINIGPT_CHECK(info.kind == TensorKind::Intermediate, "output '{}': %{} is not a computed tensor", name, t);
  info.kind = TensorKind::Output;
  info.name = name;
  g_.outputs.push_back(t);
}

int GraphBuilder::node(Op op, std::vector<int> inputs, std::vector<int64_t> shape,
                       const std::string& name, const std::string& source, const Node& attrs) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.producer = static_cast<int>(g_.nodes.size());
  const int id = g_.add_tensor(std::move(t));
  Node n = attrs;
  n.op = op;
  n.inputs = std::move(inputs);
  n.output = id;
  n.source = source;
  g_.nodes.push_back(std::move(n));
  return id;
}

int GraphBuilder::matmul(int x, int W, const std::string& name, const std::string& source) {
  std::vector<int64_t> s = g_.tensor(x).shape;
  s.back() = g_.tensor(W).shape.at(0);
  return node(Op::Matmul, {x, W}, s, name, source);
}

int GraphBuilder::bias_add(int x, int b, const std::string& name, const std::string& source) {
  return node(Op::BiasAdd, {x, b}, g_.tensor(x).shape, name, source);
}

int GraphBuilder::linear(int x, int W, int b, const std::string& name, const std::string& source) {
  return bias_add(matmul(x, W, name + ".mm", source), b, name, source);
}

int GraphBuilder::binary(Op op, int a, int b, const std::string& name, const std::string& source) {
  return node(op, {a, b}, g_.tensor(a).shape, name, source);
}

int GraphBuilder::unary(Op op, int x, const std::string& name, const std::string& source, float alpha) {
  Node a;
  a.alpha = alpha;
  return node(op, {x}, g_.tensor(x).shape, name, source, a);
}

int GraphBuilder::reduce(Op op, int x, bool acc_f64, const std::string& name, const std::string& source) {
  std::vector<int64_t> s = g_.tensor(x).shape;
  s.back() = 1;
  Node a;
  a.acc_f64 = acc_f64;
  return node(op, {x}, s, name, source, a);
}

int GraphBuilder::softmax(int x, const std::string& name, const std::string& source) {
  return node(Op::Softmax, {x}, g_.tensor(x).shape, name, source);
}

int GraphBuilder::layernorm(int x, int w, int b, float eps, const std::string& name, const std::string& source) {
  Node a;
  a.alpha = eps;
  return node(Op::LayerNorm, {x, w, b}, g_.tensor(x).shape, name, source, a);
}

int GraphBuilder::embedding(int ids, int table, const std::string& name, const std::string& source) {
  return node(Op::Embedding, {ids, table}, {g_.tensor(ids).numel(), g_.tensor(table).shape.at(1)}, name, source);
}

int GraphBuilder::pos_embedding(int table, int64_t rows, int64_t period, int64_t offset,
                                const std::string& name, const std::string& source, int pos) {
  Node a;
  a.period = period;
  a.offset = pos >= 0 ? 0 : offset;
  a.runtime_offset = pos >= 0;
  std::vector<int> in{table};
  if (pos >= 0) in.push_back(pos);
  return node(Op::PosEmbedding, in, {rows, g_.tensor(table).shape.at(1)}, name, source, a);
}

int GraphBuilder::attention_pieces(int qkv, int heads, const std::string& p, const std::string& source) {
  const std::vector<int64_t>& s = g_.tensor(qkv).shape;  // (B, T, 3C)
  const int64_t B = s.at(0), T = s.at(1), C = s.at(2) / 3, dh = C / heads;
  int part[3];
  for (int k = 0; k < 3; ++k) {
    Node a;
    a.part = k;
    a.heads = heads;
    part[k] = node(Op::SplitHeads, {qkv}, {B, heads, T, dh}, p + "." + "qkv"[k], source, a);
  }
  const int scores = node(Op::AttnScores, {part[0], part[1]}, {B, heads, T, T}, p + ".scores", source);
  const int scaled = unary(Op::MulScalar, scores, p + ".scaled", source,
                           1.0f / std::sqrt(static_cast<float>(dh)));
  const int masked = node(Op::CausalMask, {scaled}, {B, heads, T, T}, p + ".masked", source);
  const int probs = softmax(masked, p + ".probs", source);
  const int heads_out = node(Op::WeightedSum, {probs, part[2]}, {B, heads, T, dh}, p + ".heads", source);
  return node(Op::MergeHeads, {heads_out}, {B, T, C}, p + ".out", source);
}

int GraphBuilder::kv_write(int qkv, int cache, int part, int64_t row, const std::string& name,
                           const std::string& source, int pos) {
  Node a;
  a.part = part;
  a.offset = pos >= 0 ? 0 : row;
  a.runtime_offset = pos >= 0;
  std::vector<int> in{qkv, cache};
  if (pos >= 0) in.push_back(pos);
  const int out = node(Op::KvWrite, in, g_.tensor(cache).shape, name, source, a);
  g_.tensor(out).alias_of = cache;
  return out;
}

int GraphBuilder::attention_decode(int qkv, int k_cache, int v_cache, int heads, int64_t offset,
                                   const std::string& name, const std::string& source, int pos) {
  const std::vector<int64_t> s = g_.tensor(qkv).shape;
  Node a;
  a.heads = heads;
  a.offset = pos >= 0 ? 0 : offset;
  a.runtime_offset = pos >= 0;
  std::vector<int> in{qkv, k_cache, v_cache};
  if (pos >= 0) in.push_back(pos);
  return node(Op::Attention, in, {s.at(0), s.at(1), s.at(2) / 3}, name, source, a);
}

Graph GraphBuilder::finish() {
  verify(g_, "capture");
  return std::move(g_);
}

// ---- TinyHead ---------------------------------------------------------------------------

TinyHead TinyHead::init(uint64_t seed) {
  TinyHead h;
  h.weight = Tensor::empty({kOut, kIn});
  h.bias = Tensor::empty({kOut});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.125f, 0.125f);  // 1/sqrt(in), as nn.Linear
  for (float& v : h.weight.span()) v = u(rng);
  for (float& v : h.bias.span()) v = u(rng);
  return h;
}

void TinyHead::forward(const float* x, int64_t B, float* y, ThreadPool& pool) const {
  cpu::linear_forward(x, weight.data(), bias.data(), y, B, kIn, kOut, pool);
  cpu::softmax(y, y, B, kOut, pool);
}

Graph capture_tinyhead(int64_t B) {
  GraphBuilder b(fmt::format("tinyhead_B{}", B));
  const int x = b.input("x", {B, TinyHead::kIn});
  const int W = b.weight("fc.weight", {TinyHead::kOut, TinyHead::kIn});
  const int bias = b.weight("fc.bias", {TinyHead::kOut});
  const int logits = b.linear(x, W, bias, "fc.out", "fc (cpu::linear_forward)");
  b.output(b.softmax(logits, "y", "softmax (cpu::softmax)"), "y");
  return b.finish();
}

// ---- GrammarMiniGPT ---------------------------------------------------------------------

namespace {

// The weights of one block, as graph leaves named like the state_dict.
struct BlockLeaves {
  int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

BlockLeaves block_leaves(GraphBuilder& b, const ModelConfig& c, int l) {
  const int64_t d = c.d_model, F = c.d_ff();
  const std::string p = fmt::format("blocks.{}.", l);
  BlockLeaves w{};
  w.ln1_w = b.weight(p + "ln1.weight", {d});
  w.ln1_b = b.weight(p + "ln1.bias", {d});
  w.qkv_w = b.weight(p + "attn.qkv.weight", {3 * d, d});
  w.qkv_b = b.weight(p + "attn.qkv.bias", {3 * d});
  w.proj_w = b.weight(p + "attn.proj.weight", {d, d});
  w.proj_b = b.weight(p + "attn.proj.bias", {d});
  w.ln2_w = b.weight(p + "ln2.weight", {d});
  w.ln2_b = b.weight(p + "ln2.bias", {d});
  w.fc1_w = b.weight(p + "mlp.fc1.weight", {F, d});
  w.fc1_b = b.weight(p + "mlp.fc1.bias", {F});
  w.fc2_w = b.weight(p + "mlp.fc2.weight", {d, F});
  w.fc2_b = b.weight(p + "mlp.fc2.bias", {d});
  return w;
}

// The MLP half and the residual adds of one block, shared by the forward and the decode step.
// x (N, d) -> x + fc2(gelu(fc1(ln2(x)))).
int mlp_half(GraphBuilder& b, const BlockLeaves& w, int mid, float eps, const std::string& p) {
  const int ln2 = b.layernorm(mid, w.ln2_w, w.ln2_b, eps, p + "ln2.out", p + "ln2 (cpu::layernorm_forward)");
  const int fc1 = b.linear(ln2, w.fc1_w, w.fc1_b, p + "mlp.fc1.out", p + "mlp.fc1 (cpu::linear_forward_packed)");
  const int act = b.unary(Op::Gelu, fc1, p + "mlp.gelu", p + "mlp.fc1 (LinearEpilogue gelu)");
  const int fc2 = b.linear(act, w.fc2_w, w.fc2_b, p + "mlp.fc2.out", p + "mlp.fc2 (cpu::linear_forward_packed)");
  return b.binary(Op::Add, fc2, mid, p + "out", p + "mlp.fc2 (LinearEpilogue residual)");
}

struct HeadLeaves {
  int ln_f_w, ln_f_b, lm_w, lm_b;
};

HeadLeaves head_leaves(GraphBuilder& b, const ModelConfig& c) {
  const int64_t d = c.d_model, V = c.vocab_size;
  return {b.weight("ln_f.weight", {d}), b.weight("ln_f.bias", {d}),
          b.weight("lm_head.weight", {V, d}), b.weight("lm_head.bias", {V})};
}

int lm_head(GraphBuilder& b, const HeadLeaves& h, int x, float eps) {
  const int lnf = b.layernorm(x, h.ln_f_w, h.ln_f_b, eps, "ln_f.out", "ln_f (cpu::layernorm_forward)");
  return b.linear(lnf, h.lm_w, h.lm_b, "lm_head.out", "lm_head (cpu::linear_forward_packed)");
}

}  // namespace

Graph capture_gpt(const ModelConfig& c, int64_t B, int64_t T) {
  MINIGPT_CHECK(B >= 1 && T >= 1, "capture_gpt: batch {} and sequence length {} must be >= 1", B, T);
  MINIGPT_CHECK(T <= c.block_size, "capture_gpt: sequence length {} exceeds the model's block_size {}", T, c.block_size);
  const int64_t N = B * T, d = c.d_model, V = c.vocab_size;
  const float eps = c.layernorm_eps;
  GraphBuilder b(fmt::format("gpt_B{}_T{}", B, T));
  const int ids = b.input("ids", {B, T}, DType::I32);
  const int wte = b.weight("wte.weight", {V, d});
  const int wpe = b.weight("wpe.weight", {c.block_size, d});
  std::vector<BlockLeaves> blocks;
  for (int l = 0; l < c.n_layer; ++l) blocks.push_back(block_leaves(b, c, l));
  const HeadLeaves head = head_leaves(b, c);

  // x (N, d) = wte[ids] + wpe[t]
  const int te = b.embedding(ids, wte, "wte.out", "embed (wte[ids])");
  const int pe = b.pos_embedding(wpe, N, T, 0, "wpe.out", "embed (wpe[t])");
  int x = b.binary(Op::Add, te, pe, "embed.out", "embed (wte[ids] + wpe[t])");
  for (int l = 0; l < c.n_layer; ++l) {
    const BlockLeaves& w = blocks[static_cast<size_t>(l)];
    const std::string p = fmt::format("blocks.{}.", l);
    // attention half: mid = x + proj(attention(ln1(x)))
    const int ln1 = b.layernorm(x, w.ln1_w, w.ln1_b, eps, p + "ln1.out", p + "ln1 (cpu::layernorm_forward)");
    const int qkv2 = b.linear(ln1, w.qkv_w, w.qkv_b, p + "attn.qkv.out", p + "attn.qkv (cpu::linear_forward_packed)");
    // (N, 3d) viewed as (B, T, 3d) for the attention pieces: same buffer, same strides
    b.graph().tensor(qkv2).shape = {B, T, 3 * d};
    b.graph().tensor(qkv2).strides = contiguous_strides({B, T, 3 * d});
    const int att = b.attention_pieces(qkv2, c.n_head, p + "attn", p + "attn (cpu::attention_forward)");
    b.graph().tensor(att).shape = {N, d};  // merge heads writes (B, T, d) = (N, d) rows
    b.graph().tensor(att).strides = contiguous_strides({N, d});
    const int proj = b.linear(att, w.proj_w, w.proj_b, p + "attn.proj.out", p + "attn.proj (cpu::linear_forward_packed)");
    const int mid = b.binary(Op::Add, proj, x, p + "mid", p + "attn.proj (LinearEpilogue residual)");
    x = mlp_half(b, w, mid, eps, p);
  }
  const int logits = lm_head(b, head, x, eps);
  b.graph().tensor(logits).shape = {B, T, V};
  b.graph().tensor(logits).strides = contiguous_strides({B, T, V});
  b.output(logits, "logits");
  b.output(b.softmax(logits, "probs", "probs (cpu::softmax)"), "probs");
  return b.finish();
}

Graph capture_gpt_decode(const ModelConfig& c, int64_t t) {
  MINIGPT_CHECK(t == kRuntimePosition || (t >= 0 && t < c.block_size), "capture_gpt_decode: position {} outside [0, {})", t, c.block_size);
  const int64_t d = c.d_model;
  const float eps = c.layernorm_eps;
  const bool runtime = t == kRuntimePosition;
  GraphBuilder b(runtime ? std::string("gpt_decode") : fmt::format("gpt_decode_t{}", t));
  const int ids = b.input("ids", {1, 1}, DType::I32);
  const int pos = runtime ? b.input("pos", {1}, DType::I32) : -1;  // t, read at run time
  std::vector<std::pair<int, int>> caches;
  for (int l = 0; l < c.n_layer; ++l) {
    caches.emplace_back(b.input(fmt::format("blocks.{}.k_cache", l), {c.block_size, d}),
                        b.input(fmt::format("blocks.{}.v_cache", l), {c.block_size, d}));
  }
  const int wte = b.weight("wte.weight", {c.vocab_size, d});
  const int wpe = b.weight("wpe.weight", {c.block_size, d});
  std::vector<BlockLeaves> blocks;
  for (int l = 0; l < c.n_layer; ++l) blocks.push_back(block_leaves(b, c, l));
  const HeadLeaves head = head_leaves(b, c);

  const int te = b.embedding(ids, wte, "wte.out", "decode embed (wte[id])");
  const int pe = b.pos_embedding(wpe, 1, 1, t, "wpe.out", "decode embed (wpe[t])", pos);
  int x = b.binary(Op::Add, te, pe, "embed.out", "decode embed (wte[id] + wpe[t])");
  for (int l = 0; l < c.n_layer; ++l) {
    const BlockLeaves& w = blocks[static_cast<size_t>(l)];
    const std::string p = fmt::format("blocks.{}.", l);
    const int ln1 = b.layernorm(x, w.ln1_w, w.ln1_b, eps, p + "ln1.out", p + "ln1 (cpu::layernorm_forward)");
    const int qkv = b.linear(ln1, w.qkv_w, w.qkv_b, p + "attn.qkv.out", p + "attn.qkv (cpu::linear_forward)");
    b.graph().tensor(qkv).shape = {1, 1, 3 * d};
    b.graph().tensor(qkv).strides = contiguous_strides({1, 1, 3 * d});
    const auto [kc, vc] = caches[static_cast<size_t>(l)];
    const int k = b.kv_write(qkv, kc, 1, t, p + "k_cache.new", p + "k cache row t (std::copy)", pos);
    const int v = b.kv_write(qkv, vc, 2, t, p + "v_cache.new", p + "v cache row t (std::copy)", pos);
    const int att = b.attention_decode(qkv, k, v, c.n_head, t, p + "attn.out", p + "attn (cpu::attention_decode_step)", pos);
    b.graph().tensor(att).shape = {1, d};
    b.graph().tensor(att).strides = contiguous_strides({1, d});
    const int proj = b.linear(att, w.proj_w, w.proj_b, p + "attn.proj.out", p + "attn.proj (cpu::linear_forward)");
    const int mid = b.binary(Op::Add, proj, x, p + "mid", p + "attn.proj (LinearEpilogue residual)");
    x = mlp_half(b, w, mid, eps, p);
  }
  const int logits = lm_head(b, head, x, eps);
  b.graph().tensor(logits).shape = {1, 1, c.vocab_size};
  b.graph().tensor(logits).strides = contiguous_strides({1, 1, c.vocab_size});
  b.output(logits, "logits");
  return b.finish();
}

}  // namespace minigpt::compile
