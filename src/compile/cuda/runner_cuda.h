// The compiled call on the GPU: capture -> passes -> CUDA codegen -> NVRTC (cached) -> cubin
// loaded with the driver API -> the whole launch sequence captured once as ONE CUDA graph.
//
// CudaCompiledGraph owns one device arena: every weight (copied in once), every graph input and
// output, and the planned intermediates each have a fixed slot in it, so the kernels' pointer
// parameters are bound once, at capture. run() copies the host inputs into their slots, replays
// the graph and copies the outputs back; replay() is the graph alone (inputs already in place).
// Matmuls go through cuBLAS (FP32, CUBLAS_DEFAULT_MATH: no TF32) on the graph's stream with a
// fixed workspace, or through generated GEMMs. Which variant: the caller's codegen options, or
// in the default mode with variant_by_rule (the CLI) default_cuda_variant's rule; max-autotune
// builds and times cuBLAS, generated GEMMs, generated GEMMs with PDL (also with each MLP and the
// projection before it one kernel, in clusters or a block per tile, with the attention fused
// into its projection's GEMM, with x read from global memory, and as before the GEMM prologues)
// the megakernel (one cluster launch; 256- and 1024-thread CTAs) and the rows form where its
// analysis takes the graph (codegen_cuda_rows.h: a cluster of T CTAs per sequence; its weight
// image packed on the host once and copied into the arena after the other slots) and keeps the
// fastest. The
// megakernel's cluster: the largest of 16, 8, 4, 2, 1 CTAs the GPU co-schedules
// (cuOccupancyMaxActiveClusters). A launch may also be a grid of clusters (the MLP kernel's),
// with PDL.
// CudaCompiledModel adds the shape guard (a new (B, T) logs a line and compiles anew);
// CudaCompiledDecoder is the KV-cache decode step, its caches resident in their arena slots.
//
// Environment, as the C++ back end: MINIGPT_LOGS=output_code prints the generated CUDA source;
// MINIGPT_COMPILE_DEBUG=1 writes the debug folder (lower_cuda.h) and says where. The rows form's
// stage trace: trace_rows (a separately generated and compiled traced text, launched apart).
//
// What it does not do: generate code (codegen_cuda.h), cache binaries (jit_cuda.h).
#pragma once

#include "compile/capture.h"
#include "compile/graphs_by_shape.h"
#include "compile/lower_cuda.h"
#include "compile/runner.h"

#include <cuda_runtime_api.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minigpt::compile {

struct CudaCompileOptions {
  std::string mode = "default";  // "default" | "max-autotune"
  PassOptions passes;
  CudaCodegenOptions codegen;
  // default mode: the variant by default_cuda_variant's rule (as `minigpt compile` does), not by
  // `codegen` (which the tests set to run each variant)
  bool variant_by_rule = false;
  std::filesystem::path cache_dir;  // empty: the JIT's default
  std::filesystem::path dump_dir;   // non-empty: write the debug files here (as --dump)
  bool quiet = false;
};

struct CudaCompileStats {
  double passes_s = 0, codegen_s = 0, nvrtc_s = 0, load_s = 0, total_s = 0;
  double tuning_s = 0;  // max-autotune: building and timing its candidates, before the kept one's build
  int tuned = 0;        // max-autotune: how many candidates were built and timed
  bool cache_hit = false;
  std::string key, arch, variant;
  std::string candidates;  // max-autotune: each candidate's measured forward ("cublas 250.1 us, ...")
  std::string why;         // how the variant was chosen
};

// The default mode's variant for a graph, by a rule from measurement (the H200, 2026-12-01,
// experiments/25-compile/REPORT.md section 7; the whole forward at (2, 16): cuBLAS 252 us,
// generated GEMMs 74 us, with PDL 70 us): when every matmul is launch-bound (at most
// kLaunchBoundRows rows; cuBLAS's SGEMM plus its epilogue kernel 11-14 us per Linear at 32 rows,
// the generated GEMM with its epilogue fused 1.8-3.9 us) the generated GEMMs, with PDL on sm_90
// and later; otherwise cuBLAS. `why` gets the rule's reason. max-autotune measures instead.
// The generated GEMMs take the codegen defaults (codegen_cuda.h: the layernorms as GEMM
// prologues, x staged in shared memory, weights loaded before PDL's wait, and on sm_90+ the
// projection and the MLP as one kernel in 8-CTA clusters; below sm_90 the MLP's GEMMs apart):
// 22 launches instead of 31, the whole forward 56.2 us against 69.7 us for the form above (the
// same run, H200, 2026-12-01, max-autotune's "generated-gemm pdl unfused-ln x-global"); with the
// attention a warp per query and the weights early, 40.5 us (19:15 UTC run, experiments/
// 25-compile/REPORT.md section 7d); with the projection and the MLP one cluster kernel, 14
// launches, 35.1 us (7e; a block per tile lost to the MLP apart); with fc2's partials pushed
// (mlp_push: one cluster barrier, not two), 32.6 us against 34.0 pulled in the same run (7j).
// On sm_90+, a graph the rows form's analysis takes (plan_rows: a forward of whole sequences, T <=
// 16) gets the rows form on top (CudaCodegenOptions::rows: one kernel, a cluster of T CTAs per
// sequence): 22.4-22.6 us per replay against 29.4-29.5 for the 14-kernel form in the same run
// (experiments/25-compile/gpu_rows15/call1); `why` says which, or why not. A GPU that cannot run
// it (no cluster of T CTAs with its shared memory fits) gets the form without it, `why` saying so.
inline constexpr int64_t kLaunchBoundRows = 256;
CudaCodegenOptions default_cuda_variant(const Graph& captured, std::string& why);
// The same rule for a GPU of compute capability `cc_major` (asks no GPU: benches and tests on a
// machine without one name the variant an H200 runs).
CudaCodegenOptions default_cuda_variant_for(const Graph& captured, int cc_major, std::string& why);

// Whether a CUDA GPU is visible (and the driver answers).
bool cuda_gpu_visible();

// The current GPU's FP32 peak: SMs x 128 FP32 lanes x 2 (FMA) x the SM clock (Hopper, Ampere
// GA10x and Ada have 128 FP32 lanes per SM).
double cuda_fp32_peak_flops();

// `work` (launches on the stream it is given) captured `repeat` times into one CUDA graph and
// replayed `runs` times, timed with CUDA events: the median time of one `work`, microseconds.
double time_captured_us(cudaStream_t stream, const std::function<void(cudaStream_t)>& work, int runs, int repeat = 20);

class CudaModule;  // a loaded cubin (runner_cuda.cpp)

class CudaCompiledGraph {
 public:
  // Runs the pipeline, compiles (or finds) the cubin, loads it, copies the weights into the
  // arena and captures the graph. Error if a weight is missing or there is no GPU.
  CudaCompiledGraph(const Graph& captured, const WeightBinding& weights, const CudaCompileOptions& opt);
  ~CudaCompiledGraph();
  CudaCompiledGraph(const CudaCompiledGraph&) = delete;
  CudaCompiledGraph& operator=(const CudaCompiledGraph&) = delete;

  // Host inputs (graph order) into their slots, one replay, host outputs back; synchronises.
  void run(std::span<const void* const> inputs, std::span<float* const> outputs);
  // The graph alone on the stream (no copies, no synchronisation).
  void replay();
  void synchronize();
  // A slot's device address (graph tensor id; an alias resolves to what it aliases).
  void* slot(int tensor) const;
  cudaStream_t stream() const { return stream_; }

  // Median time of one replay (CUDA events around it), and of one replay within `batch`
  // back-to-back replays; microseconds.
  struct GraphTime {
    double single_us = 0, batched_us = 0;
  };
  GraphTime time_graph(int runs, int batch = 100);
  // Per scheduled kernel: its launches captured alone, `repeat` times in one graph, timed with
  // events; median over `runs` of (time / repeat), microseconds. On the current slot contents.
  std::vector<double> time_kernels(int runs, int repeat = 20);

  // The rows form's stage trace (CudaCodegenOptions::rows_trace; `minigpt compile --device cuda
  // --explain` prints it): the same graph generated again with the trace's stamps (a text and
  // cubin of its own: the timed text stays the untraced one), launched `launches` times on the
  // current slot contents (the last launch's stamps kept: the earlier ones warm the module), with
  // the same arguments and launch; per interval (the start, then each stage, as the plan comment
  // names it) the cycles of thread 0 of cluster 0's last CTA (the row with the most keys). The
  // intervals sum to total_cycles by construction; total_ns is the same span by %globaltimer.
  // outputs_same: every graph output after the traced launches bitwise as before them (the stamps
  // change no value). With dump_dir (--dump): output_code_trace.cu and trace.txt written there.
  // Not the rows form: an empty result.
  struct RowsTrace {
    std::vector<std::string> stages;
    std::vector<long long> cycles;
    long long total_cycles = 0;
    double total_ns = 0;
    bool outputs_same = false;
    std::string source;  // the traced text
  };
  RowsTrace trace_rows(int launches = 3);

  const Graph& captured() const { return captured_; }
  const CudaLowered& lowered() const { return lowered_; }
  const CudaCompileStats& stats() const { return stats_; }

 private:
  CudaCompiledGraph(const Graph& captured, const WeightBinding& weights);  // members only
  // (below sm_90 the MLP kernel takes its block form: no clusters)
  void build(const CudaCompileOptions& opt, const CudaCodegenOptions& asked, const std::string& variant);
  void launch(const CudaLaunch& l);  // one step of the plan on stream_
  void release();

  Graph captured_;
  const WeightBinding* weights_;
  CudaCompileOptions opt_;    // as built (trace_rows lowers again with these)
  CudaCodegenOptions built_;  // the codegen options lowered_ came from
  CudaLowered lowered_;
  CudaCompileStats stats_;
  std::unique_ptr<CudaModule> module_;
  std::vector<void*> functions_;           // CUfunction per launch (null for Sgemm)
  std::vector<std::vector<void*>> params_;  // per launch: the argument values
  std::vector<std::vector<void*>> param_ptrs_;
  std::map<int, size_t> offset_;  // tensor id -> byte offset in the arena
  char* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  size_t image_at_ = 0;  // the rows form's weight image in the arena (CudaCode::image_floats)
  void* cublas_ = nullptr;  // cublasHandle_t
  void* workspace_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<std::pair<size_t, int64_t>> position_caps_;
};

// The whole model's forward on the GPU, compiled per (B, T) with a shape guard.
class CudaCompiledModel {
 public:
  explicit CudaCompiledModel(const GrammarMiniGPT& model, CudaCompileOptions opt = {});
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs);
  CudaCompiledGraph& graph_for(int64_t B, int64_t T);
  int compiles() const { return graphs_.compiles(); }

 private:
  const GrammarMiniGPT* model_;
  CudaCompileOptions opt_;
  WeightBinding weights_;
  GraphsByShape<CudaCompiledGraph> graphs_;
};

// The decode step on the GPU: one graph for every position; the KV caches live in their arena
// slots across steps (zeroed at reset); a step copies the token and the position in and the
// logits out.
class CudaCompiledDecoder {
 public:
  explicit CudaCompiledDecoder(const GrammarMiniGPT& model, CudaCompileOptions opt = {});
  void reset();
  int64_t position() const { return pos_; }
  std::span<const float> step(int32_t id);

 private:
  const GrammarMiniGPT* model_;
  WeightBinding weights_;
  std::unique_ptr<CudaCompiledGraph> graph_;
  std::vector<float> logits_;
  int64_t pos_ = 0;
};

}  // namespace minigpt::compile
