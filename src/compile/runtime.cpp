// make_runtime: the trampolines from the plain-C runtime ABI into the engine; and the ABI's
// embedded text (minigpt/runtime_abi_source.h, generated from runtime_abi.h by CMake).
#include "compile/runtime.h"

#include "kernels/cpu/linear.h"
#include "minigpt/runtime_abi_source.h"

namespace minigpt::compile {

namespace {

void parallel_for_trampoline(void* pool, int64_t n, int64_t grain, mg_range_fn fn, void* ctx) {
  static_cast<ThreadPool*>(pool)->parallel_for(
      n, [fn, ctx](int64_t begin, int64_t end) { fn(ctx, begin, end); }, grain);
}

void linear_packed_trampoline(void* pool, const float* x, const float* W, const float* packed,
                              const float* b, float* y, int64_t N, int64_t in, int64_t out,
                              const float* residual, int32_t gelu) {
  cpu::LinearEpilogue ep;
  ep.residual = residual;
  ep.gelu = gelu != 0;
  cpu::linear_forward_packed(x, W, packed, b, y, N, in, out, *static_cast<ThreadPool*>(pool), ep);
}

}  // namespace

MgRuntime make_runtime(ThreadPool& pool) {
  MgRuntime rt{};
  rt.abi_version = MG_RUNTIME_ABI_VERSION;
  rt.threads = pool.size();
  rt.pool = &pool;
  rt.parallel_for = &parallel_for_trampoline;
  rt.linear_packed = &linear_packed_trampoline;
  return rt;
}

std::string_view runtime_abi_source() {
  return {kRuntimeAbiSource, sizeof(kRuntimeAbiSource) - 1};
}

}  // namespace minigpt::compile
