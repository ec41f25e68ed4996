// The C++ back end: a schedule -> ONE self-contained C++ translation unit.
//
// Every non-matmul kernel's loops are generated here from the IR for the shapes at hand:
// loads with their index expressions, the fused arithmetic, reductions (lane-wise
// accumulators over a fixed vector width, combined in a fixed order), the scalar tail when the
// row length is not a multiple of the width, and the stores. The inner loops have constant
// trip counts so that g++ -O3 -march=native turns them into vector instructions. Matmuls call
// the engine's packed GEMM through MgRuntime (as Inductor calls an external addmm). Work is
// split over MgRuntime.parallel_for where it is large enough. `call()` runs the kernels in
// order on the arena. Each kernel carries a comment with its source ops, shapes, bytes read and
// written and FLOPs.
//
// What it does not do: compile or load the source (jit.h), choose between variants
// (runner.h's max-autotune), generate matmuls (codegen_gemm.h).
#pragma once

#include "compile/codegen_gemm.h"
#include "compile/schedule.h"

#include "core/isa.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile {

inline constexpr int kCodegenCppVersion = 4;  // bump on any change to the generated text's meaning

// The generated row loops' vector width for an ISA (MINIGPT_ISA, core/isa.h): one register of
// floats: AVX-512 16, AVX2 8, and for scalar SSE2's 4 (the x86-64 baseline, what -mno-avx
// leaves the compiler; the generator's narrowest width).
constexpr int isa_vec_width(Isa isa) { return isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 4; }

struct CodegenOptions {
  int vec_width = isa_vec_width(active_isa());  // lanes per vector step of a row loop (1 = scalar)
  int64_t parallel_min_work = 1 << 15;   // elements (rows x cols) before a kernel uses threads
  std::string runtime_abi;               // runtime_abi.h's text, embedded verbatim
  // Matmuls: the engine's packed GEMM through MgRuntime (Inductor's extern addmm), a
  // fixed-shape GEMM generated for each shape with its epilogue (codegen_gemm.h), or kAuto:
  // per matmul by gemm_generated_by_rule (codegen_gemm.h).
  GemmBackend gemm = GemmBackend::kAuto;
  // max-autotune's choice per GEMM shape (autotune_gemm.h): a matmul whose shape has a pick
  // takes it (the engine's GEMM, or the generated schedule), whatever `gemm` says; the others
  // follow `gemm` with gemm_resolve's default schedule.
  std::vector<GemmPick> gemm_picks;
};

// What each slot of call()'s `io` array holds.
struct IoSlot {
  enum class Kind : uint8_t { Input, Output, Weight, Packed } kind;
  int tensor;        // graph tensor id (Packed: the weight's id)
  std::string name;  // "ids", "logits", "wte.weight", "blocks.0.attn.qkv.weight"
  std::string gemm;  // Packed: the generated GEMM whose panels these are; empty: the engine's
};

struct GeneratedKernel {
  std::string name;
  std::string text;  // the kernel's functions, as they appear in the source
};

struct GeneratedCode {
  std::string source;                   // the whole translation unit
  std::vector<GeneratedKernel> kernels;  // one per scheduled kernel, for debug dumps
  std::vector<IoSlot> io;                // call()'s io[] layout
  std::vector<GeneratedGemm> gemms;      // the generated GEMMs the source holds (by name)
  std::string entry = "call";           // extern "C" void call(const MgRuntime*, char* arena, void* const* io)
};

GeneratedCode generate_cpp(const Schedule& s, const CodegenOptions& opt);

}  // namespace minigpt::compile
