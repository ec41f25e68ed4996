// The CUDA back end's pipeline and debug files (lower_cuda.h).
#include "compile/lower_cuda.h"

#include "compile/codegen_cuda_parts.h"
#include "compile/codegen_cuda_rows.h"

#include "core/timer.h"

#include <fmt/format.h>
#include "io/atomic_file.h"

namespace minigpt::compile {

CudaLowered lower_cuda(const Graph& captured, const PassOptions& passes, const CudaCodegenOptions& asked) {
  CudaLowered l;
  const Timer t0;
  CudaCodegenOptions codegen = asked;
  if (codegen.rows) {
    RowsPlan rp = plan_rows(captured, codegen.rows_slice_threads);
    if (rp.refused.empty()) {
      l.passes_s = t0.elapsed_s();
      const Timer t1;
      l.code = generate_rows(rp, l.schedule);
      l.codegen_s = t1.elapsed_s();
      l.note = fmt::format("rows form: {} stages, one cluster of {} CTAs per sequence", rp.stages.size(), rp.T);
      return l;
    }
    l.note = fmt::format("rows form refused ({}); the other options' form instead", rp.refused);
    codegen.rows = false;
  }
  // a GEMM takes a row-wise prologue when it is generated (a cuBLAS call cannot)
  PassOptions popt = passes;
  popt.matmul_prologue = passes.matmul_prologue || (codegen.generated_gemm && codegen.matmul_prologue);
  popt.attention_prologue = passes.attention_prologue || (codegen.generated_gemm && codegen.attention_prologue);
  popt.fuse_mlp = passes.fuse_mlp || (codegen.generated_gemm && codegen.fuse_mlp);
  popt.fuse_mlp_proj = popt.fuse_mlp && (passes.fuse_mlp_proj || (codegen.generated_gemm && codegen.fuse_mlp_proj));
  popt.fuse_mlp_attention = popt.fuse_mlp_proj && (passes.fuse_mlp_attention || (codegen.generated_gemm && codegen.fuse_mlp_attention && !codegen.megakernel));
  // the next block's layernorm and qkv in the MLP kernel: its cluster form only (not the megakernel's stages)
  popt.fuse_mlp_next = popt.fuse_mlp_proj && (passes.fuse_mlp_next || (codegen.generated_gemm && codegen.fuse_mlp_next && codegen.mlp_cluster &&
                                                                         codegen.mlp_push && codegen.mlp_async && !codegen.megakernel));
  Graph planned = run_passes(captured, popt);
  // (the CPU schedule's GEMM choice only names its matmul kernels; cuda_schedule renames them)
  const GemmBackend gemm = codegen.generated_gemm ? GemmBackend::kGenerated : GemmBackend::kEngine;
  Schedule s = schedule(planned, gemm);
  if (popt.fuse_mlp_next) {  // the tail is the cluster form's: where an MLP kernel does not fit it, planned again without
    for (const Kernel& k : s.kernels)
      if (mlp_parts(planned, k).next && !cuda_gen::mlp_cluster_fits(planned, k, codegen.mlp_rows)) {
        popt.fuse_mlp_next = false;
        planned = run_passes(captured, popt);
        s = schedule(planned, gemm);
        break;
      }
  }
  l.schedule = cuda_schedule(s, codegen.generated_gemm);
  l.passes_s = t0.elapsed_s();
  const Timer t1;
  l.code = generate_cuda(l.schedule, codegen);
  l.codegen_s = t1.elapsed_s();
  return l;
}

void write_cuda_debug_files(const std::filesystem::path& dir, const Graph& captured, const CudaLowered& l) {
  std::filesystem::create_directories(dir / "kernels");
  io::write_file_atomic((dir / "ir_pre_fusion.txt").string(), print_graph(captured, "pre-fusion"));
  io::write_file_atomic((dir / "ir_post_fusion.txt").string(), print_graph(l.schedule.graph, "post-fusion, buffers planned"));
  io::write_file_atomic((dir / "schedule.txt").string(), print_schedule(l.schedule));
  io::write_file_atomic((dir / "output_code.cu").string(), l.code.source);
  for (const CudaKernelText& k : l.code.kernels) io::write_file_atomic((dir / "kernels" / (k.name + ".cu")).string(), k.text);
}

}  // namespace minigpt::compile
