// The CUDA back end's pipeline without a GPU: captured graph -> passes (the same ones the C++
// back end runs) -> schedule -> kernels renamed cuda_* -> CUDA C source and launch plan; and the
// debug files (ir_pre_fusion.txt, ir_post_fusion.txt, schedule.txt, output_code.cu,
// kernels/<name>.cu). Plain C++: `minigpt compile --device cuda --dump` and the CPU-side tests
// (which then compile the source with NVRTC) use it on machines without a GPU.
//
// What it does not do: compile (cuda/jit_cuda.h) or run (cuda/runner_cuda.h).
#pragma once

#include "compile/codegen_cuda.h"
#include "compile/passes/passes.h"
#include "compile/schedule.h"

#include <filesystem>
#include <string>

namespace minigpt::compile {

struct CudaLowered {
  Schedule schedule;  // kernels named cuda_*
  CudaCode code;
  double passes_s = 0, codegen_s = 0;
  // what the lowering decided beyond the options (the rows form refused: why, and what runs instead)
  std::string note;
};

// codegen.rows: the rows form (codegen_cuda_rows.h) when plan_rows takes the graph; otherwise the
// options without it, `note` saying why.
// passes.matmul_prologue and attention_prologue are turned on where the codegen options allow
// them (generated GEMMs with CudaCodegenOptions::matmul_prologue / attention_prologue, the
// default for them).
CudaLowered lower_cuda(const Graph& captured, const PassOptions& passes, const CudaCodegenOptions& codegen);

void write_cuda_debug_files(const std::filesystem::path& dir, const Graph& captured, const CudaLowered& l);

// MINIGPT_CUDA_VARIANT's words applied to cg (the runner's default mode and `minigpt compile
// --device cuda --dump` without a GPU share them): an Error names an unknown word.
void apply_variant_words(CudaCodegenOptions& cg, const std::string& words);

}  // namespace minigpt::compile
