// `minigpt compile --device cuda`: the GPU back end's half of cmd_compile.cpp (which captures
// the graph and draws its inputs). Writes --dump without a GPU (the source is text) and, with
// the CUDA toolkit, compiles it with NVRTC; with a GPU also loads it, runs it as one CUDA graph
// and, with --explain, times every kernel against the H200 roofline.
#pragma once

#include "compile/ir.h"
#include "compile/runner.h"

#include <span>
#include <string>

namespace minigpt::cli {

struct CompileCudaRequest {
  const compile::Graph* captured = nullptr;
  const compile::WeightBinding* weights = nullptr;
  std::span<const void* const> inputs;  // host, graph order
  std::string mode = "default";
  std::string dump;
  bool explain = false;
  int runs = 200;
};

void run_compile_cuda(const CompileCudaRequest& r);

}  // namespace minigpt::cli
