// max-autotune's harness: several candidate implementations of one kernel (generated variants:
// vector width, unrolling, thread split, a generated fixed-shape GEMM; or a library call such
// as cpu::linear_forward_packed), each JIT-compiled, checked and timed on the caller's inputs;
// the fastest is returned with every timing, for the compile report and --explain.
//
// How it measures: every candidate is compiled first (in parallel, through the JIT cache), run
// once and checked (optional), then timed in rounds, one sample of each candidate per round,
// so that a noisy stretch of the machine hits every candidate alike. A sample is `inner`
// back-to-back calls (chosen so a sample lasts >= min_sample_us) divided by `inner`; a
// candidate's time is the median of its samples. A candidate that does not compile or fails
// its check is reported with the reason and never chosen.
//
// Compile time: each distinct request is one compiler run (~0.6 s of it parsing <immintrin.h>
// and the embedded math), so variants are best generated into one source and given as
// candidates sharing that request with different symbols: it is compiled and loaded once.
//
// What it does not do: generate the variants (codegen_*), or remember the choice across runs
// (the caller keys its choice on the same things as the JIT key, if it wants to).
#pragma once

#include "compile/jit.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace minigpt::compile {

struct AutotuneCandidate {
  std::string label;      // "generated r6v4u1s1", "library GEMM"
  JitRequest request;     // empty source: a host candidate (call gets a null fn)
  std::string symbol;     // the entry point to look up in the compiled library
  // Runs the candidate once on the caller's inputs; fn is the symbol's address.
  std::function<void(void* fn)> call;
  // After the first call: "" if the output is right, else why not (the candidate is dropped).
  std::function<std::string()> check;
};

struct AutotuneOptions {
  int warmup = 3;               // untimed calls per candidate before the rounds
  int rounds = 31;              // samples per candidate (the median is reported)
  double min_sample_us = 20.0;  // a sample repeats the call until it lasts this long
  int compile_threads = 0;      // 0 = std::thread::hardware_concurrency()
};

struct AutotuneTiming {
  std::string label;
  double median_us = 0, min_us = 0;  // per call; 0 when not timed
  int inner = 0;                     // calls per sample
  bool cache_hit = false;            // the JIT found it compiled
  double compile_s = 0;
  std::string error;                 // why it was dropped; empty for a timed candidate
};

struct AutotuneResult {
  int best = -1;                        // index into timings / the candidates
  std::vector<AutotuneTiming> timings;  // in the candidates' order
  std::shared_ptr<JitLibrary> library;  // the winner's (null for a host winner): keep it alive
  void* fn = nullptr;                   // the winner's symbol (null for a host winner)
  // A markdown table: candidate, median and min us, speed against the winner, or the error.
  std::string table() const;
};

// Error if there are no candidates or none survives compilation and its check.
AutotuneResult autotune(const std::vector<AutotuneCandidate>& candidates,
                        const AutotuneOptions& options = {});

// The ceiling a kernel's FLOP rate is set against (--explain's fraction of the roofline): one
// core's fp32 FMA rate, measured once per process with a JIT-compiled loop of 24 independent
// FMA chains of the widest vectors the CPU has (AVX-512, else AVX2), best of 15 runs of ~0.5 ms
// (the best, not the median: a ceiling). cache_dir as JitRequest's.
struct FmaPeak {
  double gflops = 0;  // 2 flops per lane per FMA
  std::string isa;    // "avx512" or "avx2"
};
const FmaPeak& fma_peak(const std::filesystem::path& cache_dir = {});

}  // namespace minigpt::compile
