// The compiled call: capture -> passes -> schedule -> codegen -> JIT -> run.
//
// CompiledGraph is one graph compiled for its shapes and bound to weights: the Linear weights
// are packed once, the arena allocated once, and run() copies nothing but calls the generated
// call(). CompiledModel wraps GrammarMiniGPT's forward: it compiles for the first (B, T) it is
// called with, and a later call with another (B, T) fails the shape guard, logs a line to
// stderr and compiles anew (each shape kept). CompiledDecoder is the KV-cache decode step: one
// graph for every cache position t, which it reads at run time from its "pos" input (the
// caches' block_size rows are its static capacity, guarded in run()).
//
// Environment, as Inductor's: MINIGPT_LOGS=output_code prints the generated source to stderr;
// MINIGPT_COMPILE_DEBUG=1 writes ir_pre_fusion.txt, ir_post_fusion.txt, schedule.txt,
// output_code.cpp and one file per kernel into a folder ($MINIGPT_COMPILE_DEBUG_DIR, else
// /tmp/minigpt_compile_debug/<graph>_<key>) and says where in a log line.
//
// What it does not do: the JIT's caching (jit.h), the GEMM's packing layout (kernels/cpu).
#pragma once

#include "compile/capture.h"
#include "compile/codegen_cpp.h"
#include "compile/graphs_by_shape.h"
#include "compile/passes/passes.h"
#include "compile/schedule.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/gpt.h"

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minigpt::compile {

class JitLibrary;

struct CompileOptions {
  std::string mode = "default";  // "default" | "max-autotune"
  PassOptions passes;
  CodegenOptions codegen;             // runtime_abi is filled by the runner
  std::filesystem::path cache_dir;    // empty: the JIT's default
  std::filesystem::path dump_dir;     // non-empty: write the debug files here (as --dump)
  bool quiet = false;                 // no log lines (tests)
};

struct CompileStats {
  double passes_s = 0, codegen_s = 0, jit_s = 0, total_s = 0;
  bool cache_hit = false;
  std::string key;           // the JIT cache key
  std::string variant;       // max-autotune: the variant kept
};

// Weight values by state_dict name, and their packed forms (made once, shared by graphs).
struct WeightBinding {
  std::map<std::string, const float*> values;
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;  // (out, in) of matrices
  std::map<std::string, Tensor> packed;                       // filled on first use
  const float* packed_for(const std::string& name);                              // engine's GEMM
  const float* packed_gemm(const GeneratedGemm& gemm, const std::string& name);  // generated GEMM
};
WeightBinding bind_weights(const ModelWeights& w);
WeightBinding bind_tinyhead(const TinyHead& h);

class CompiledGraph {
 public:
  // Runs the pipeline on `captured` and loads the result. Error if a weight is missing.
  CompiledGraph(const Graph& captured, WeightBinding& weights, const CompileOptions& opt);
  ~CompiledGraph();

  // inputs/outputs in the graph's order (int32 ids or floats), each of the graph's shape.
  void run(std::span<const void* const> inputs, std::span<float* const> outputs, ThreadPool& pool);
  // One kernel alone on the current arena/outputs (after a run): what --explain times.
  void run_kernel(int index, ThreadPool& pool);

  const Graph& captured() const { return captured_; }
  const Schedule& schedule() const { return schedule_; }
  const GeneratedCode& code() const { return code_; }
  const CompileStats& stats() const { return stats_; }

 private:
  void bind_io(std::span<const void* const> inputs, std::span<float* const> outputs);

  Graph captured_;
  Schedule schedule_;
  GeneratedCode code_;
  CompileStats stats_;
  std::shared_ptr<JitLibrary> lib_;
  void (*call_)(const void*, char*, void* const*) = nullptr;
  void (*call_kernel_)(const void*, char*, void* const*, int) = nullptr;
  Tensor arena_;
  std::vector<void*> io_;
  std::vector<std::pair<size_t, int64_t>> position_caps_;  // (input index, capacity) of runtime positions
};

// A compiled forward's checks and outputs, as GrammarMiniGPT::forward's: the shape against
// block_size, every id inside the vocabulary (Error naming the first bad one), logits and probs
// (B, T, V) allocated unless they already have that shape. Both back ends call it.
void prepare_forward(const ModelConfig& c, const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs);

// The whole model's forward, compiled per (B, T) with a shape guard.
class CompiledModel {
 public:
  explicit CompiledModel(const GrammarMiniGPT& model, CompileOptions opt = {});
  // As GrammarMiniGPT::forward (same checks on ids, same outputs).
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs, ThreadPool& pool);
  // The compiled graph for (B, T), compiling it if needed (the guard's miss path).
  CompiledGraph& graph_for(int64_t B, int64_t T);
  int compiles() const { return graphs_.compiles(); }
  const GrammarMiniGPT& model() const { return *model_; }

 private:
  const GrammarMiniGPT* model_;
  CompileOptions opt_;
  WeightBinding weights_;
  GraphsByShape<CompiledGraph> graphs_;
};

// The decode step, one graph for every position (compiled on first use), with its own KV cache.
class CompiledDecoder {
 public:
  explicit CompiledDecoder(const GrammarMiniGPT& model, CompileOptions opt = {});
  void reset() { pos_ = 0; }
  int64_t position() const { return pos_; }
  std::span<const float> step(int32_t id, ThreadPool& pool);  // as Decoder::step
  CompiledGraph& graph();
  int compiles() const { return compiles_; }  // 1 after the first step, whatever the steps

 private:
  const GrammarMiniGPT* model_;
  CompileOptions opt_;
  WeightBinding weights_;
  std::unique_ptr<CompiledGraph> graph_;
  int compiles_ = 0;
  std::vector<Tensor> k_cache_, v_cache_;
  std::vector<const void*> in_;  // run()'s inputs, built once: no allocation per step
  Tensor logits_;
  int64_t pos_ = 0;
};

// The pipeline without the JIT: captured graph -> schedule and source (tests, --dump).
struct Lowered {
  Schedule schedule;
  GeneratedCode code;
  double passes_s = 0, codegen_s = 0;
};
Lowered lower(const Graph& captured, const CompileOptions& opt);
// runtime_abi.h's text, as generated sources embed it.
std::string runtime_abi_text();
// Writes the debug files of `captured` lowered with opt into dir.
void write_debug_files(const std::filesystem::path& dir, const Graph& captured, const Lowered& l);

// The environment switches both back ends read: MINIGPT_LOGS contains "output_code";
// MINIGPT_COMPILE_DEBUG set and not "0"; the debug folder of a graph and its cache key.
bool env_logs_output_code();
bool env_compile_debug();
std::filesystem::path debug_dir_for(const std::string& graph, const std::string& key);

}  // namespace minigpt::compile
