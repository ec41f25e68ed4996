// `minigpt compile --device cuda` (cmd_compile_cuda.h).
//
// --explain prints, per generated kernel: the ops fused, the tensors kept on chip against
// eager, bytes moved, FLOPs, its launch, the measured time (its launches alone, 20 times in one
// CUDA graph, CUDA events, median of --runs) and the fraction of the roofline floor
// max(bytes / 4.27 TB/s, FLOPs / FP32 peak) it reaches: 4.27 TB/s is the copy bandwidth
// measured on the project's H200 (design.md), the peak SMs x 128 x 2 x clock of this device.
// Then the whole forward as one graph (one replay; and per replay within 100 back-to-back), and
// each generated softmax against the hand-written fused kernel (kernels/cuda/softmax.h) at the
// same shape, default and autotuned configs. The rows form (one kernel) also gets its stage trace
// (CudaCompiledGraph::trace_rows: the same graph generated again with a clock64 stamp after every
// stage's closing barrier, compiled and launched apart from the timed text): per interval (the
// start, then each stage as the generated plan comment names it) its cycles and share, the total
// against the kernel's measured time; with --dump also output_code_trace.cu and trace.txt.
#include "cli/cmd_compile_cuda.h"

#include "compile/lower_cuda.h"
#include "core/cuda_memory.h"
#include "core/error.h"
#include "core/timer.h"

#ifdef MINIGPT_HAVE_CUDA_COMPILE
#include "compile/cuda/jit_cuda.h"
#include "compile/cuda/runner_cuda.h"
#include "kernels/cuda/autotune.h"
#include "kernels/cuda/softmax.h"
#endif

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

namespace minigpt::cli {

namespace {

constexpr double kH200CopyBandwidth = 4.27e12;  // bytes/s, measured (design.md)

#ifdef MINIGPT_HAVE_CUDA_COMPILE

// The hand-written fused softmax at (rows, cols): (default config us, autotuned us).
std::pair<double, double> hand_written_softmax_us(int64_t rows, int64_t cols, int runs) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> host(n);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd;
  for (float& v : host) v = nd(rng);
  float* x = static_cast<float*>(cuda_memory::allocate(n * 4));
  float* y = static_cast<float*>(cuda_memory::allocate(n * 4));
  cuda_memory::copy_to_device(x, host.data(), n * 4);
  cudaStream_t s = nullptr;
  MINIGPT_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate failed");
  const cuda::FusedConfig def = cuda::fused_default_config(cols, cuda::fused_limits());
  const double d = compile::time_captured_us(s, [&](cudaStream_t st) { cuda::softmax_fused(x, y, rows, cols, def, st); }, runs);
  cuda::AutotuneOptions ao;  // no cache file: tuned here
  const cuda::AutotuneResult tuned = cuda::autotune_fused(x, rows, cols, ao, s);
  const double t = compile::time_captured_us(s, [&](cudaStream_t st) { cuda::softmax_fused(x, y, rows, cols, tuned.config, st); }, runs);
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  cuda_memory::release(x);
  cuda_memory::release(y);
  return {d, t};
}

void explain(compile::CudaCompiledGraph& cg, int runs) {
  using namespace compile;
  const Schedule& s = cg.lowered().schedule;
  const double peak = cuda_fp32_peak_flops();
  const std::vector<double> times = cg.time_kernels(runs);
  fmt::print("\nexplain (cuda, {}; roofline: {:.2f} TB/s measured copy bandwidth, FP32 peak {:.1f} TFLOP/s)\n", cg.stats().arch,
             kH200CopyBandwidth / 1e12, peak / 1e12);
  fmt::print("| kernel | ops fused | kept on chip vs eager | bytes moved | FLOPs | launch | time (us) | roofline |\n");
  fmt::print("| --- | --- | --- | ---: | ---: | --- | ---: | ---: |\n");
  double total = 0;
  for (size_t i = 0; i < s.kernels.size(); ++i) {
    const Kernel& k = s.kernels[i];
    std::string ops, launch;
    for (int n : k.nodes) ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(s.graph.nodes[static_cast<size_t>(n)].op));
    int64_t removed = 0;
    for (int r : k.removed) removed += s.graph.tensor(r).bytes();
    for (const CudaLaunch& l : cg.lowered().code.launches) {
      if (l.name != k.name) continue;
      launch += (launch.empty() ? "" : " + ") +
                (l.kind == CudaLaunch::Kind::Sgemm ? std::string("sgemm") : fmt::format("<<<{}, {}>>>", l.grid, l.block));
    }
    const double bytes = static_cast<double>(k.bytes_read + k.bytes_written);
    const double floor_s = std::max(bytes / kH200CopyBandwidth, static_cast<double>(k.flops) / peak);
    const std::string kept = k.removed.empty() ? "-" : fmt::format("{} tensors, {} B", k.removed.size(), removed);
    if (std::isnan(times[i])) {  // a stage of the megakernel: timed only as part of the whole
      fmt::print("| {} | {} | {} | {} | {} | megakernel stage | - | - |\n", k.name, ops, kept, k.bytes_read + k.bytes_written, k.flops);
      continue;
    }
    total += times[i];
    fmt::print("| {} | {} | {} | {} | {} | {} | {:.2f} | {:.1f}% |\n", k.name, ops, kept, k.bytes_read + k.bytes_written, k.flops,
               launch, times[i], 100.0 * floor_s / (times[i] * 1e-6));
  }
  for (const CudaLaunch& l : cg.lowered().code.launches)
    if (l.cluster > 0)
      fmt::print("| {} | all {} kernels above, as stages | - | - | - | one cluster <<<{}, {}>>>, {} B shared | - | - |\n", l.function,
                 s.kernels.size(), l.grid, l.block, l.smem);
  const auto whole = cg.time_graph(runs);
  if (!cg.stats().candidates.empty())
    fmt::print("\nmax-autotune measured (per forward, 20 back to back): {}; kept: {}\n", cg.stats().candidates, cg.stats().variant);
  fmt::print("\nsum of kernels {:.2f} us; whole forward as one CUDA graph: {:.2f} us per replay alone, {:.2f} us per replay in 100 "
             "back to back (median of {})\n",
             total, whole.single_us, whole.batched_us, runs);
  // the rows form: its stage trace (a traced text of its own, launched once the timing is done). A
  // measuring aid: if it cannot be compiled or launched, say so and go on (the timing above stands)
  CudaCompiledGraph::RowsTrace tr;
  try {
    tr = cg.trace_rows();
  } catch (const Error& e) {
    fmt::print("\nstage trace unavailable: {}\n", e.what());
  }
  if (!tr.cycles.empty()) {
    const double kernel_us = times.empty() || std::isnan(times[0]) ? 0.0 : times[0];
    fmt::print("\nstage trace of {} (the traced text, codegen_cuda_rows.h's rows_trace: clock64 by thread 0 of cluster 0's last CTA, "
               "the row with the most keys, after each stage's closing barrier, and inside the attention and qkv stages; the last of 3 launches)\n",
               cg.lowered().code.launches[0].function);
    fmt::print("| interval | cycles | share |\n| --- | ---: | ---: |\n");
    for (size_t i = 0; i < tr.cycles.size(); ++i)
      fmt::print("| {} | {} | {:.1f}% |\n", tr.stages[i], tr.cycles[i],  // (the names say their stage: "stage s: ..")
                 100.0 * static_cast<double>(tr.cycles[i]) / static_cast<double>(std::max(tr.total_cycles, 1LL)));
    fmt::print("TRACE total {} cycles over {} intervals = {:.2f} us by %globaltimer (~{:.2f} GHz: approximate, at %globaltimer's resolution); "
               "the kernel timed above {:.2f} us; "
               "outputs bitwise unchanged by the traced launches: {}\n",
               tr.total_cycles, tr.cycles.size(), tr.total_ns * 1e-3, tr.total_ns > 0 ? static_cast<double>(tr.total_cycles) / tr.total_ns : 0.0,
               kernel_us, tr.outputs_same ? "yes" : "NO");
  }
  for (size_t i = 0; i < s.kernels.size(); ++i) {
    const Kernel& k = s.kernels[i];
    if (k.kind != KernelKind::Rowwise || k.name.find("softmax") == std::string::npos || std::isnan(times[i])) continue;
    const auto [def, tuned] = hand_written_softmax_us(k.rows, k.cols, runs);
    fmt::print("{} ({} x {}): generated {:.2f} us; hand-written softmax_fused {:.2f} us (default config), {:.2f} us (autotuned): "
               "generated / best hand-written = {:.3f}\n",
               k.name, k.rows, k.cols, times[i], def, tuned, times[i] / std::min(def, tuned));
  }
}

#endif  // MINIGPT_HAVE_CUDA_COMPILE

}  // namespace

void run_compile_cuda(const CompileCudaRequest& r) {
  using namespace compile;
  const Graph& captured = *r.captured;
  CudaCodegenOptions cg;
  // without a GPU nothing is timed: max-autotune's dump shows its generated-GEMM candidate (with a
  // GPU the runner writes the variant it keeps over this)
  cg.generated_gemm = r.mode == "max-autotune";
  // MINIGPT_CUDA_VARIANT's words (apply_variant_words, the runner's own: "rows", "no-rows", an
  // unknown word an Error) in the dump without a GPU too (with one, the runner applies them over the
  // default rule's variant and writes the form it runs over these files)
  if (const char* v = std::getenv("MINIGPT_CUDA_VARIANT"); v && *v) apply_variant_words(cg, v);
  if (!r.dump.empty()) {
    const CudaLowered l = lower_cuda(captured, PassOptions{}, cg);
    write_cuda_debug_files(r.dump, captured, l);
    fmt::print("wrote the debug files (output_code.cu, kernels/*.cu, IR, schedule) to {}\n", r.dump);
  }
#ifndef MINIGPT_HAVE_CUDA_COMPILE
  MINIGPT_CHECK(!r.explain, "--device cuda --explain: this build has no CUDA (configure with the cuda preset)");
  if (r.dump.empty()) MINIGPT_FAIL("--device cuda: this build has no CUDA; only --dump works");
#else
  if (!cuda_gpu_visible()) {
    // NVRTC needs no GPU: compile for Hopper through the cache, report, run nothing
    MINIGPT_CHECK(!r.explain, "--device cuda --explain: no CUDA GPU visible");
    const Timer t;
    const CudaLowered l = lower_cuda(captured, PassOptions{}, cg);
    CudaJitRequest req;
    req.source = l.code.source;
    req.key_extra = fmt::format("codegen_cuda v{} graph {} cli", kCodegenCudaVersion, l.code.graph_hash);
    req.name = captured.name;
    req.arch = "sm_90a";
    const CudaBinary b = cuda_jit_compile(req);
    fmt::print("graph {}: {} kernels; no CUDA GPU visible: compiled for {} only ({} cubin bytes, {}, {:.3f} s), nothing run\n",
               captured.name, l.schedule.kernels.size(), b.arch, b.cubin.size(), b.cache_hit ? "cache hit" : "NVRTC", t.elapsed_s());
    for (const Kernel& k : l.schedule.kernels) fmt::print("  {}\n", k.name);
    return;
  }
  CudaCompileOptions co;
  co.mode = r.mode;
  co.variant_by_rule = true;
  co.quiet = r.mode != "max-autotune";  // max-autotune says what each candidate measured
  co.dump_dir = r.dump;
  const Timer cold;
  CudaCompiledGraph g(captured, *r.weights, co);
  const double first_s = cold.elapsed_s();
  const Timer warm;
  CudaCompiledGraph again(captured, *r.weights, co);
  const double warm_s = warm.elapsed_s();
  const auto& st = g.stats();
  fmt::print("graph {} (cuda, {}): {} nodes captured -> {} kernels ({} launches), mode {} (variant {})\n", captured.name, st.arch,
             captured.nodes.size(), g.lowered().schedule.kernels.size(), g.lowered().code.launches.size(), r.mode, st.variant);
  // max-autotune's first build compiles and times every candidate (most of its seconds); the
  // breakdown after it is the kept variant's own build, a cache hit by then
  const std::string tuning =
      st.tuned > 0 ? fmt::format("{} candidates built and timed in {:.3f} s, then the kept one: ", st.tuned, st.tuning_s) : "";
  fmt::print("compile: {:.3f} s ({}{}; passes {:.1f} ms, codegen {:.1f} ms, NVRTC {:.3f} s, load + arena + graph capture {:.1f} ms); "
             "again: {:.1f} ms ({}; load + capture {:.1f} ms)\n",
             first_s, tuning, st.cache_hit ? "cache hit" : "cold", st.passes_s * 1e3, st.codegen_s * 1e3, st.nvrtc_s, st.load_s * 1e3,
             warm_s * 1e3, again.stats().cache_hit ? "cache hit" : "compiled", again.stats().load_s * 1e3);
  fmt::print("variant: {} ({})\n", st.variant, st.why);
  if (!st.candidates.empty()) fmt::print("max-autotune measured (per forward, 20 back to back): {}\n", st.candidates);
  fmt::print("cubin key {}\n", st.key);
  for (const Kernel& k : g.lowered().schedule.kernels) fmt::print("  {}\n", k.name);
  // one run on the drawn inputs (outputs back on the host: the graph works end to end)
  std::vector<std::vector<float>> outs;
  std::vector<float*> out_ptrs;
  for (int t : captured.outputs) {
    outs.emplace_back(static_cast<size_t>(captured.tensor(t).numel()));
    out_ptrs.push_back(outs.back().data());
  }
  g.run(r.inputs, out_ptrs);
  if (r.explain) explain(g, r.runs);
#endif
}

}  // namespace minigpt::cli
