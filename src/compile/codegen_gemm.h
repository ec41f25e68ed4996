// A generated fixed-shape GEMM: y (M, N) = x (M, K) W^T + b, then an epilogue (none, GELU,
// residual add), as C++ source text for the JIT, for one shape and one instruction set. What a
// compiled graph's matmuls call on AVX-512 by default (gemm_generated_by_rule below), and what
// max-autotune times against the library GEMM (cpu::linear_forward_packed) per shape.
//
// The generated code, for AVX-512 (16 lanes; AVX2: 8; scalar: 1 "lane" per column):
//   - W^T is packed once (gemm_pack_weights, here on the host) into panels of P = nv * lanes
//     columns: panel p is a (K, P) row-major block holding columns [p P, p P + P) of W^T,
//     zero-padded past N, so every weight load is a full aligned-size vector;
//   - a register tile of mr rows x nv vectors accumulates over the whole of K (the K loop's
//     bound is a constant, unrolled spec.unroll times in the text), x broadcast from memory;
//   - the work is a list of tasks, one register tile each, panel by panel (the K x P panel
//     stays in L1 for every row tile of it), rows inside; the entry point takes a task range
//     [t0, t1), so a caller may split rows and panels over threads;
//   - the last panel's last vector is stored under a mask when N is not a multiple of lanes.
// Summation order, element (m, n): s = sum over k = 0, 1, ..., K-1 of x(m, k) W(n, k), one FMA
// chain in increasing k (with ksplit = S > 1: S chains, chain s over k = s, s + S, ...,
// added as ((c_0 + c_1) + c_2) ...), then s + b[n], then + residual(m, n) or GELU(s). With
// ksplit = 1 this is cpu::gemm_avx512's order exactly (its forward on N >= 4 rows), so the
// AVX-512 result equals linear_forward_packed's bit for bit before the GELU. The AVX-512 GELU is
// gelu_avx512.h's mg_gelu_table_ps (embedded; 6 ulp from the exact GELU where eager's gelu_ps
// is 7.9, the same function but not the same bits), applied by one shared function over each tile right after its
// store (mg_gelu_rows: one copy of the GELU code instead of one per accumulator). The AVX2 and
// scalar variants use the same order; their GELU is the scalar erf form of gelu.cpp's fallback.
//
// What it does not do: choose among variants (autotune.h), compile (jit.h), or run threads
// itself (the caller splits [0, tasks), or generate_gemm_parallel's wrapper does).
#pragma once

#include "compile/runtime_abi.h"

#include "core/isa.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile {

enum class GemmIsa { kAvx512, kAvx2, kScalar };
enum class GemmEpilogueKind { kNone, kGelu, kResidual };

// Which GEMM a compiled graph's matmuls call: the engine's packed GEMM (cpu::linear_forward_
// packed through MgRuntime, Inductor's extern addmm), a generated fixed-shape GEMM, or, kAuto
// (default mode), by gemm_generated_by_rule below.
enum class GemmBackend : uint8_t { kAuto, kEngine, kGenerated };

const char* gemm_isa_name(GemmIsa isa);  // "avx512", "avx2", "scalar"
// The GEMM variant of the engine's ISA (MINIGPT_ISA, core/isa.h).
constexpr GemmIsa gemm_isa(Isa isa) {
  return isa == Isa::Avx512 ? GemmIsa::kAvx512 : isa == Isa::Avx2 ? GemmIsa::kAvx2 : GemmIsa::kScalar;
}
const char* gemm_epilogue_name(GemmEpilogueKind e);  // "none", "gelu", "residual"
int gemm_isa_lanes(GemmIsa isa);  // 16, 8, 1

// The rule kAuto follows, per matmul of y (M, N) = x (M, K) W^T: generated on AVX-512 (every
// M), the engine's GEMM on AVX2 and scalar builds (their generated GELU is scalar, and the
// generator was tuned for AVX-512 only). Measured (bench/compile_gemm_bench.cpp, 1 thread,
// experiments/25-compile/REPORT.md): the default generated schedule ran 1.1-1.8x faster than
// the engine's GEMM at the model's Linears at M = 32 (qkv even, within noise), 1.1-3.7x at the
// decode step's M = 1, and about 4.8x for TinyHead's M = 2 (2.3 against 11.1 us in --explain). Summation order: from M = 4 on the
// default tile has one FMA chain per accumulator, the engine's order, so the result is bitwise
// the engine's; at M = 2, 3 the engine takes a dot-product path and at M = 1 the generated tile
// splits k into 2-4 chains: other orders, ~1e-7 relative apart.
constexpr bool gemm_generated_by_rule(int64_t M, GemmIsa isa) { return isa == GemmIsa::kAvx512 && M >= 1; }
const char* gemm_backend_name(GemmBackend b);  // "auto", "engine-gemm", "generated-gemm"

struct GemmSpec {
  int64_t M = 0, N = 0, K = 0;
  bool bias = true;
  GemmEpilogueKind epilogue = GemmEpilogueKind::kNone;
  GemmIsa isa = GemmIsa::kAvx512;
  // The schedule; 0 = the default for the shape (gemm_default_schedule).
  int mr = 0;      // rows per register tile
  int nv = 0;      // vectors per register tile (panel width P = nv * lanes)
  int unroll = 0;  // k steps written out per trip of the K loop (1 when it does not divide K)
  int ksplit = 0;  // independent FMA chains over k (1 = eager's order)
  std::string name;  // the entry point's name; empty = derived from the shape and schedule
};

// A spec of this shape with the default schedule (fill mr, nv, ... afterwards to choose one).
GemmSpec gemm_spec(int64_t M, int64_t N, int64_t K,
                   GemmEpilogueKind epilogue = GemmEpilogueKind::kNone, bool bias = true,
                   GemmIsa isa = GemmIsa::kAvx512);

// spec with every 0 in its schedule replaced by the default for its shape (measured on the
// model's shapes: see bench/compile_gemm_bench.cpp), and its name filled in.
GemmSpec gemm_resolve(GemmSpec spec);

struct GeneratedGemm {
  GemmSpec spec;          // resolved
  std::string name;       // extern "C" entry point (spec.name)
  std::string code;       // the function text (needs gemm_prelude(isa) earlier in the unit)
  int64_t panel_width = 0;    // P, columns per panel
  int64_t panels = 0;         // ceil(N / P)
  int64_t packed_floats = 0;  // panels * K * P
  int64_t row_tiles = 0;      // ceil(M / mr)
  int64_t tasks = 0;          // panels * row_tiles: task t is row tile t % row_tiles of panel
                              // t / row_tiles; the entry point runs [t0, t1)
  double flops = 0;           // 2 M N K
};

// The includes and helpers every generated GEMM of this ISA needs, once per translation unit
// (AVX-512: <immintrin.h> and gelu_avx512.h's text, embedded at configure time).
std::string gemm_prelude(GemmIsa isa);

// The entry point generated is
//   extern "C" void NAME(const float* x, const float* wp, const float* b, const float* residual,
//                        float* y, int64_t t0, int64_t t1);
// x (M, K), wp from gemm_pack_weights, b (N) (ignored without spec.bias), residual (M, N)
// (read only with the residual epilogue; may be y itself), y (M, N); tasks [t0, t1) (all:
// [0, tasks)). Every element is computed the same way whatever the range: the split does not
// change the result.
GeneratedGemm generate_gemm(const GemmSpec& spec);

// One shape's GEMM as max-autotune chose it: the engine's, or a generated schedule (spec's mr,
// nv, unroll, ksplit). A compiled graph's matmul of the same (M, N, K, epilogue, bias, ISA)
// takes it.
struct GemmPick {
  GemmSpec spec;
  bool engine = false;
};
bool gemm_same_shape(const GemmSpec& a, const GemmSpec& b);  // M, N, K, epilogue, bias, ISA
// The pick for `shape` (null: none), and whether a matmul of that shape calls a generated GEMM:
// its pick's choice, else the backend's (kAuto: gemm_generated_by_rule).
const GemmPick* gemm_find_pick(const std::vector<GemmPick>& picks, const GemmSpec& shape);
bool gemm_use_generated(GemmBackend backend, const std::vector<GemmPick>& picks, const GemmSpec& shape);
// gemm_prelude + generate_gemm: a whole translation unit for jit_load.
std::string gemm_source(const GemmSpec& spec);

// The thread split: a wrapper that runs the entry point's panels through the runtime's pool,
//   extern "C" void NAME_mt(const MgRuntime* rt, const float* x, const float* wp,
//                           const float* b, const float* residual, float* y, int64_t grain);
// [0, tasks) split by rt->parallel_for into contiguous chunks of at least `grain` tasks (each
// element is computed as on one thread: the result does not depend on the split). Needs
// runtime_abi_source() (runtime.h) earlier in the unit.
std::string generate_gemm_parallel(const GeneratedGemm& gemm);
using GemmParallelFn = void (*)(const MgRuntime* rt, const float* x, const float* wp,
                                const float* b, const float* residual, float* y, int64_t grain);

// W (N, K) row-major (nn.Linear's (out, in)) -> the panels the generated code reads
// (packed_floats floats, padding zeroed).
void gemm_pack_weights(const GeneratedGemm& gemm, const float* W, float* packed);

// The signature of the entry point, for a caller that loads it with JitLibrary::symbol.
using GemmFn = void (*)(const float* x, const float* wp, const float* b, const float* residual,
                        float* y, int64_t t0, int64_t t1);

}  // namespace minigpt::compile
