// The CUDA back end's pipeline and debug files (lower_cuda.h).
#include "compile/lower_cuda.h"

#include "compile/codegen_cuda_parts.h"
#include "compile/codegen_cuda_rows.h"

#include "core/error.h"
#include "core/timer.h"

#include <fmt/format.h>

#include <sstream>
#include "io/atomic_file.h"

namespace minigpt::compile {

CudaLowered lower_cuda(const Graph& captured, const PassOptions& passes, const CudaCodegenOptions& asked) {
  CudaLowered l;
  const Timer t0;
  CudaCodegenOptions codegen = asked;
  if (codegen.rows) {
    RowsPlan rp = plan_rows(captured);
    if (rp.refused.empty()) {
      l.passes_s = t0.elapsed_s();
      const Timer t1;
      l.code = generate_rows(rp, l.schedule, codegen.rows_plain, codegen.rows_trace);
      l.codegen_s = t1.elapsed_s();
      l.note = fmt::format("rows form{}: {} stages, one cluster of {} CTAs per sequence", codegen.rows_plain ? " (plain text)" : "", rp.stages.size(), rp.T);
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

// MINIGPT_CUDA_VARIANT (a debugging and measuring aid, the default mode only): words of
// variant_name's, each changing the generated GEMMs' options from the variant asked (the rule's):
// "weights-plain" / "weights-restrict", "ln-early" / "ln-late", "mlp-async" / "mlp-sync",
// "mlp-pull" / "mlp-push", "no-cluster", "rowsN", "smem-vec4", "proj-apart", "mlp-apart", "mlp-next", "next-all",
// "mbar-cta", "pad-launches", "rows" (the rows form, codegen_cuda_rows.h: one cluster kernel,
// a row per CTA; a graph it refuses keeps the rest's form, --explain says why), "rows-plain" (the
// rows form's text before the hand-written kernel's variants were ported: rows_plain), "no-rows"
// (not the rows form, where the rule would choose it); any other word is an error. ("weights-restrict ln-late mlp-sync" is 7l's default, main before 7m.)
// Two are measuring aids only, never candidates: "mbar-cta" (CudaCodegenOptions::mlp_mbar_cta)
// and "pad-launches" (pad_launches).
void apply_variant_words(CudaCodegenOptions& cg, const std::string& words) {
  std::istringstream in(words);
  for (std::string w; in >> w;) {
    if (w == "weights-plain" || w == "weights-restrict") cg.weights_plain = w == "weights-plain";
    else if (w == "ln-early" || w == "ln-late") cg.ln_weights_early = w == "ln-early";
    else if (w == "mlp-async" || w == "mlp-sync") cg.mlp_async = w == "mlp-async";
    else if (w == "mlp-pull") cg.mlp_push = false;
    else if (w == "mlp-push") cg.mlp_push = true;
    else if (w == "no-cluster") cg.mlp_cluster = false;
    else if (w == "smem-vec4") cg.smem_vec4 = true;
    else if (w == "proj-apart") cg.fuse_mlp_proj = false;
    else if (w == "mlp-apart") cg.fuse_mlp = false;
    else if (w == "mbar-cta") cg.mlp_mbar_cta = true;
    else if (w == "pad-launches") cg.pad_launches = true;
    else if (w == "mlp-next") cg.fuse_mlp_next = true;
    else if (w == "next-all") cg.mlp_next_split = false;
    else if (w == "rows") cg.rows = true;
    else if (w == "rows-plain") cg.rows = true, cg.rows_plain = true;
    else if (w == "no-rows") cg.rows = false;
    else if (w.starts_with("rows") && w.size() == 5 && w[4] >= '1' && w[4] <= '8') cg.mlp_rows = w[4] - '0';
    else MINIGPT_FAIL("MINIGPT_CUDA_VARIANT: unknown word '{}' (weights-plain weights-restrict ln-early ln-late mlp-async mlp-sync mlp-pull "
                      "mlp-push no-cluster rowsN smem-vec4 proj-apart mlp-apart mbar-cta pad-launches mlp-next next-all rows rows-plain no-rows)", w);
  }
}

}  // namespace minigpt::compile
