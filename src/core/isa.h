// Which instruction set the CPU kernels run: the one switch behind every run-time dispatch in
// kernels/cpu (and train/adamw.cpp), so that tests can force each code path on one machine.
//
// MINIGPT_ISA=scalar|avx2|avx512 is read once, on the first call of active_isa(); unset (or
// empty) means the best ISA this CPU supports. An unknown name, or an ISA this CPU lacks, is an
// Error naming the value and what the CPU has (the CLI checks it before any subcommand runs).
// What each ISA means per kernel (a kernel without a version for an ISA takes the next one down):
//
//   kernel                               avx512                 avx2                scalar
//   linear forward/backward/packed       gemm_avx512.h          OpenBLAS sgemm      plain loops, no BLAS
//   softmax_simd, exp_poly               AVX-512 pipeline       AVX2 pipeline       one-lane two-pass
//   GELU, layernorm, cross-entropy,      AVX-512                plain loops         plain loops
//     attention, AdamW, grad norm
//   copy_stream                          AVX-512 streaming      SSE2 streaming      SSE2 streaming
//
// "avx2" for the linear layer means "no hand-written AVX-512 GEMM": OpenBLAS, whose Debian
// build picks its own kernels by CPUID (on the GPU host its generic Prescott SSE3 ones); it is
// the path a machine without AVX-512 runs. "scalar" is the plain statement of the arithmetic in
// C++ loops (the compiler may still use baseline SSE2), with no BLAS; copy_stream's streaming
// stores are SSE2 there too, since SSE2 is the x86-64 baseline.
//
// What this file does not do: pick per-kernel ISAs, or change the ISA after the first call
// (kernels that take an ISA explicitly, as softmax_simd_with, check cpu_supports()).
#pragma once

#include <vector>

namespace minigpt {

enum class Isa { Scalar, Avx2, Avx512 };  // ordered: each one's CPU needs include the one before

Isa active_isa();                    // MINIGPT_ISA, else the best supported; cached after the first call
const char* isa_name(Isa isa);       // "scalar" | "avx2" | "avx512" (the MINIGPT_ISA spelling)
bool cpu_supports(Isa isa);          // scalar: always; avx2: AVX2 + FMA; avx512: that + AVX-512F
std::vector<Isa> supported_isas();   // every ISA this CPU runs, scalar first

// The parsing behind active_isa(), for tests: value = MINIGPT_ISA's text, null when unset.
Isa isa_from_env_value(const char* value);

}  // namespace minigpt
