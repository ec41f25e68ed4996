// Capture: models become graphs at fixed shapes.
//
// GraphBuilder is the small API that writes a graph by hand, one call per eager op, each
// naming its result and the eager op it stands for. TinyHead (the seed's Linear(64, 600) then
// softmax) is six lines with it (capture_tinyhead). capture_gpt records GrammarMiniGPT's
// forward at (B, T) op by op, following model/gpt.cpp's run_forward; capture_gpt_decode records
// one KV-cache decode step (B = 1, T = 1, t tokens already cached) following model/decoder.cpp.
// Weights are named as the model's state_dict (wte.weight, blocks.0.ln1.weight, ...): the graph
// holds their names and shapes, never their values (the runner binds them).
//
// What it does not do: trace arbitrary C++ (the capture is written against the engine's
// model, op for op, and the compiled-vs-eager tests hold the two together), optimise anything.
#pragma once

#include "compile/ir.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile {

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name);

  int input(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::F32);
  int weight(const std::string& name, std::vector<int64_t> shape);
  // Marks t as the graph's next output (its name becomes `name`).
  void output(int t, const std::string& name);

  // One op each; `name` names the result, `source` the eager op ("blocks.0.ln1
  // (cpu::layernorm_forward)"). Returns the result's tensor id.
  int linear(int x, int W, int b, const std::string& name, const std::string& source);  // matmul + bias_add
  int matmul(int x, int W, const std::string& name, const std::string& source);
  int bias_add(int x, int b, const std::string& name, const std::string& source);
  int binary(Op op, int a, int b, const std::string& name, const std::string& source);
  int unary(Op op, int x, const std::string& name, const std::string& source, float alpha = 0);
  int reduce(Op op, int x, bool acc_f64, const std::string& name, const std::string& source);
  int softmax(int x, const std::string& name, const std::string& source);
  int layernorm(int x, int w, int b, float eps, const std::string& name, const std::string& source);
  int embedding(int ids, int table, const std::string& name, const std::string& source);
  // pos >= 0: the offset/row is that (1) i32 input's value at run time (offset/row unused).
  int pos_embedding(int table, int64_t rows, int64_t period, int64_t offset,
                    const std::string& name, const std::string& source, int pos = -1);
  // The attention core between the qkv and proj Linears, as its pieces: split q, k, v into
  // heads, scores q k^T, scale 1/sqrt(dh), causal mask, softmax, weighted sum of v, merge.
  int attention_pieces(int qkv, int heads, const std::string& prefix, const std::string& source);
  int kv_write(int qkv, int cache, int part, int64_t row, const std::string& name,
               const std::string& source, int pos = -1);
  int attention_decode(int qkv, int k_cache, int v_cache, int heads, int64_t offset,
                       const std::string& name, const std::string& source, int pos = -1);

  Graph& graph() { return g_; }
  Graph finish();  // verifies ("capture") and returns the graph

  // The general form every helper above uses.
  int node(Op op, std::vector<int> inputs, std::vector<int64_t> shape, const std::string& name,
           const std::string& source, const Node& attrs = {});

 private:
  Graph g_;
};

// TinyHead: y (B, 600) = softmax(x (B, 64) W^T + b), the seed's stand-in.
struct TinyHead {
  static constexpr int64_t kIn = 64, kOut = 600;
  Tensor weight;  // (600, 64)
  Tensor bias;    // (600)
  // nn.Linear's default init, deterministic for a seed: uniform(-1/8, 1/8) for both.
  static TinyHead init(uint64_t seed);
  // The eager forward: cpu::linear_forward then cpu::softmax. y (B, 600).
  void forward(const float* x, int64_t B, float* y, ThreadPool& pool) const;
};
Graph capture_tinyhead(int64_t B);  // input "x" (B, 64); weights "fc.weight", "fc.bias"

// GrammarMiniGPT's forward at fixed (B, T): input "ids" (B, T) i32; outputs "logits" and
// "probs" (B, T, V).
Graph capture_gpt(const ModelConfig& config, int64_t B, int64_t T);

// One decode step with t tokens cached: inputs "ids" (1, 1) i32 and per layer the mutable
// caches "blocks.{l}.k_cache", "blocks.{l}.v_cache" (block_size, d) whose rows [0, t) hold the
// earlier positions' keys/values; the step writes row t of each. Output "logits" (1, 1, V).
// t = kRuntimePosition (the default): t is not baked in but a second input "pos" (1) i32 read
// at run time (a symbolic size; the caches' block_size rows are the static capacity), so one
// graph serves every position ("gpt_decode"); t >= 0: t is a constant ("gpt_decode_t5").
inline constexpr int64_t kRuntimePosition = -1;
Graph capture_gpt_decode(const ModelConfig& config, int64_t t = kRuntimePosition);

}  // namespace minigpt::compile
