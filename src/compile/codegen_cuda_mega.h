// The CUDA back end's megakernel form (codegen_cuda.h's CudaCodegenOptions::megakernel): every
// scheduled kernel of a graph run as a stage of ONE __global__ kernel, launched as one
// thread-block cluster, so that the whole forward is a single launch instead of one per kernel.
//
// How a kernel becomes a stage: codegen_cuda.cpp generates each kernel as usual (a __global__
// function and its launch: grid G, block b); device_function() rewrites that text into a
// __device__ function of a virtual block. The rewrite is a fixed set of substitutions of tokens
// only the generators emit:
//   the header `extern "C" __global__ void [__launch_bounds__(b)] NAME(` -> `__device__
//     __noinline__ void NAME(const int vb, const int tid, const int bar, char* mg_smem, `, and
//     no __restrict__ on its pointers (a restricted const pointer may be read through the
//     non-coherent cache, which is wrong for a buffer an earlier stage of the same launch wrote);
//   blockIdx.x -> vb (the virtual block), threadIdx.x -> tid (the thread within it);
//   __syncthreads() -> mg_bar_sync(bar, b): a named barrier over the virtual block's b threads
//     only, since a CTA may run several small virtual blocks at once;
//   `__shared__ T name[d1][d2]...;` -> a pointer of the same shape into mg_smem, this virtual
//     block's slice of the megakernel's dynamic shared memory.
// The megakernel (assemble_megakernel) has one parameter per buffer (named after the tensor),
// and runs the stages in schedule order: CTA `rank` of the cluster's `nctas` takes virtual
// blocks vb = rank + nctas * (sub + P * i), where P = min(NT / b, 15) virtual blocks run side by
// side in a CTA of NT threads (sub = threadIdx.x / b, each with its own named barrier 1 + sub
// and shared-memory slice); a cluster barrier (barrier.cluster arrive.release / wait.acquire:
// every stage's global writes visible to the whole cluster) separates a stage from the ones
// before it that it depends on: one that wrote what it reads or writes, or read what it writes
// (arena slots are shared: overlapping byte ranges count), or that used shared memory when it
// does too. Stages with none of these (a decode step's key and value cache writes) run together.
//
// What it does not do: generate any kernel body (codegen_cuda.cpp), choose the cluster size or
// launch (cuda/runner_cuda.cpp: the largest cluster of at most 16 CTAs the GPU can co-schedule).
#pragma once

#include "compile/codegen_cuda.h"

#include <string>
#include <vector>

namespace minigpt::compile {

// The generated CUDA's temporaries numbered by tensor id (acc12, row12, rcp12, tmp12, red12,
// v12, x12): renumbered when kernels are compared for identical code (codegen_text.h loops_key).
inline constexpr const char* kCudaTempPrefixes = "acc|row|rcp|tmp|red|v|x";

// The most CTAs the megakernel's cluster may have (non-portable cluster size on sm_90).
inline constexpr int kMegakernelMaxCtas = 16;

// One generated kernel as the megakernel's stage: its __global__ text, its launch.
struct MegaStage {
  std::string text;   // the kernel form, as codegen_cuda.cpp generated it
  CudaLaunch launch;  // grid = virtual blocks, block = threads per virtual block
  std::vector<int> reads, writes;  // the tensors it reads and writes (the scheduled kernel's)
};

// The kernel text as a __device__ function of a virtual block (the rewrite above); `smem_bytes`
// gets the bytes of shared memory one virtual block uses. Error if the text has a form the
// rewrite does not know (a generator changed without this file).
std::string device_function(const std::string& kernel_text, int block, int64_t& smem_bytes);

// The device functions of every stage, then the megakernel calling them in order; `launch` gets
// the megakernel's launch (function, block, dynamic shared memory, args; cluster = the most
// CTAs). `name` is the megakernel's function name.
// `threads`: the CTA's threads (0: the widest stage's block).
std::string assemble_megakernel(const Graph& g, const std::vector<MegaStage>& stages, const std::string& name, int threads,
                                CudaLaunch& launch);

}  // namespace minigpt::compile
