// Schedule: a fused graph (after the passes) -> kernels in execution order, each with a stable
// name after what it fuses (cpp_fused_softmax_0, cpp_fused_add_layernorm_2, extern_linear_1,
// as Inductor names its kernels), the tensors it reads and writes, and its cost (bytes moved,
// FLOPs) and what it saves against eager (intermediates it keeps in registers).
//
// What it does not do: emit code (codegen_cpp.h), place buffers (passes/plan_buffers.cpp
// already gave every intermediate its arena offset).
#pragma once

#include "compile/codegen_gemm.h"
#include "compile/ir.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile {

// PrologueMatmul: a row-wise group or an attention, then the matmul reading its result
// (passes.h's matmul_prologue, CUDA only): nodes = the prologue's nodes, then the matmul last;
// or an MLP (passes.h's fuse_mlp, CUDA only): [[the attention before the projection
// (fuse_mlp_attention),] the projection before its layernorm (fuse_mlp_proj),] fc1's row-wise
// prologue nodes (if any), fc1, fc2.
// rows, cols: fc1's x (the prologue's rows).
enum class KernelKind : uint8_t { Rowwise, Matmul, Attention, KvWrite, PrologueMatmul };

struct Kernel {
  std::string name;
  KernelKind kind = KernelKind::Rowwise;
  int group = -1;
  std::vector<int> nodes;    // node ids, in order
  std::vector<int> reads;    // materialised tensors read from outside the kernel, first use order
  std::vector<int> writes;   // materialised tensors written
  std::vector<int> removed;  // tensors eager would store that this kernel keeps in registers
  int64_t rows = 0, cols = 0;  // Rowwise, PrologueMatmul's prologue: the iteration space
  int64_t bytes_read = 0, bytes_written = 0, flops = 0;
  std::vector<std::string> sources;  // the distinct eager ops it stands for
};

// An MLP kernel's parts, read off its nodes (the order above): `mlp` when they end in two
// matmuls (fc1, fc2); `proj` when the attention's projection comes first, `attention` when the
// prefill attention comes before that. All false for any other kernel. The schedule, its names
// and the CUDA generator (codegen_cuda_mlp.cpp) all ask this one function.
// `next` (fuse_mlp_next): after fc2 the next block's layernorm (row-wise nodes reading fc2's
// result) and the matmul it feeds (the qkv projection) end the kernel; fc1 and fc2 are then the
// last two consecutive matmuls before those, at k.nodes[fc1] and k.nodes[fc1 + 1].
struct MlpParts {
  bool mlp = false, proj = false, attention = false, next = false;
  size_t fc1 = 0;  // fc1's index in k.nodes (fc2's: fc1 + 1)
};
MlpParts mlp_parts(const Graph& g, const Kernel& k);

struct Schedule {
  Graph graph;
  std::vector<Kernel> kernels;
};

// gemm, picks: which matmuls will be generated GEMMs (named cpp_gemm_N) and which calls of the
// engine's GEMM (extern_linear_N), decided per matmul by gemm_use_generated as codegen_cpp does.
Schedule schedule(const Graph& fused, GemmBackend gemm = GemmBackend::kAuto, const std::vector<GemmPick>& picks = {});
// A matmul node's GEMM shape (M, N, K, epilogue, bias; the engine's ISA), schedule unresolved.
GemmSpec matmul_gemm_shape(const Graph& g, const Node& n);
// A table: one line per kernel (name, ops, shapes, bytes, FLOPs).
std::string print_schedule(const Schedule& s);

}  // namespace minigpt::compile
