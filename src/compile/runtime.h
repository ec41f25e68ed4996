// The host side of runtime_abi.h: an MgRuntime whose function pointers lead into this engine
// (its ThreadPool, its packed GEMM), and the ABI's text for the code generator to embed.
//
// Generated code receives `const MgRuntime*` and calls rt->parallel_for(rt->pool, ...) and
// rt->linear_packed(rt->pool, ...); the trampolines here turn those calls back into
// ThreadPool::parallel_for and cpu::linear_forward_packed. What it does not do: compile or
// load anything (jit.h), or decide what the generated code calls (codegen_cpp).
#pragma once

#include "compile/runtime_abi.h"
#include "core/thread_pool.h"

#include <string_view>

namespace minigpt::compile {

// An MgRuntime for `pool` (which must outlive every call through it). Plain data: copy freely.
// Calls through it must not throw across the generated code (a C++ exception from a range
// function propagates through parallel_for back into the generated caller).
MgRuntime make_runtime(ThreadPool& pool);

// runtime_abi.h's text exactly as in the source tree, embedded at configure time, for the
// generated translation unit to paste at its top (the generated code includes no project
// header). Part of every JIT key through the source text, with MG_RUNTIME_ABI_VERSION in it.
std::string_view runtime_abi_source();

}  // namespace minigpt::compile
