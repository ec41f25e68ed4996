// The runtime ABI through the JIT (compile/runtime.h): a generated source that pastes
// runtime_abi_source() is compiled and loaded, and calls the engine's thread pool and packed
// GEMM through the MgRuntime it is given; results are checked against the eager calls.
#include "compile/jit.h"
#include "compile/runtime.h"
#include "compile_jit_test_util.h"
#include "kernels/cpu/linear.h"
#include "layers_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

// What a code generator emits around the ABI text: plain C entry points taking the runtime.
const char* kEntryPoints = R"(
#include <math.h>
struct FillCtx { float* y; };
static void fill_range(void* ctx, int64_t begin, int64_t end) {
  float* y = ((struct FillCtx*)ctx)->y;
  for (int64_t i = begin; i < end; ++i) y[i] = (float)begin + 0.5f * (float)(i - begin);
}
extern "C" int32_t test_abi_version(const MgRuntime* rt) { return rt->abi_version * 1000 + MG_RUNTIME_ABI_VERSION; }
extern "C" void test_fill(const MgRuntime* rt, float* y, int64_t n, int64_t grain) {
  struct FillCtx ctx = {y};
  rt->parallel_for(rt->pool, n, grain, fill_range, &ctx);
}
extern "C" void test_linear(const MgRuntime* rt, const float* x, const float* W, const float* packed,
                            const float* b, float* y, int64_t N, int64_t in, int64_t out,
                            const float* residual, int32_t gelu) {
  rt->linear_packed(rt->pool, x, W, packed, b, y, N, in, out, residual, gelu);
}
)";

std::shared_ptr<JitLibrary> load_entry_points(const std::filesystem::path& dir) {
  JitRequest r;
  r.source = std::string(runtime_abi_source()) + kEntryPoints;
  r.key_extra = "compile_runtime_test";
  r.name = "runtime_test";
  r.cache_dir = dir;
  return jit_load(r);
}

}  // namespace

TEST(CompileRuntime, AbiSourceIsTheHeaderText) {
  std::ifstream in(std::string(MINIGPT_SOURCE_DIR) + "/src/compile/runtime_abi.h", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  EXPECT_EQ(runtime_abi_source(), text.str());
}

TEST(CompileRuntime, GeneratedCodeCallsPoolAndGemm) {
  testjit::TempCacheDir dir;
  const auto lib = load_entry_points(dir.path());
  ThreadPool pool(2);
  const MgRuntime rt = make_runtime(pool);
  EXPECT_EQ(rt.threads, 2);

  auto abi = reinterpret_cast<int32_t (*)(const MgRuntime*)>(lib->symbol("test_abi_version"));
  EXPECT_EQ(abi(&rt), MG_RUNTIME_ABI_VERSION * 1000 + MG_RUNTIME_ABI_VERSION);

  // parallel_for: the chunks the generated code sees are the pool's own chunks.
  auto fill = reinterpret_cast<void (*)(const MgRuntime*, float*, int64_t, int64_t)>(
      lib->symbol("test_fill"));
  for (const int64_t grain : {int64_t{1}, int64_t{300}, int64_t{5000}}) {
    const int64_t n = 1001;
    std::vector<float> got(n, NAN), want(n, NAN);
    fill(&rt, got.data(), n, grain);
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            want[i] = static_cast<float>(begin) + 0.5f * static_cast<float>(i - begin);
        },
        grain);
    EXPECT_EQ(got, want) << "grain " << grain;
  }

  // linear_packed: bit-for-bit the eager cpu::linear_forward_packed, each epilogue.
  auto linear = reinterpret_cast<void (*)(const MgRuntime*, const float*, const float*,
                                          const float*, const float*, float*, int64_t, int64_t,
                                          int64_t, const float*, int32_t)>(
      lib->symbol("test_linear"));
  const int64_t N = 32, in = 64, out = 600;
  const auto x = testref::random_floats(N * in, 1), W = testref::random_floats(out * in, 2),
             b = testref::random_floats(out, 3), res = testref::random_floats(N * out, 4);
  std::vector<float> packed(static_cast<size_t>(cpu::linear_packed_floats(in, out)));
  cpu::linear_pack_weights(W.data(), packed.data(), in, out);
  for (int mode = 0; mode < 3; ++mode) {
    const float* residual = mode == 1 ? res.data() : nullptr;
    const int32_t gelu = mode == 2;
    std::vector<float> got(N * out, NAN), want(N * out, NAN);
    linear(&rt, x.data(), W.data(), packed.data(), b.data(), got.data(), N, in, out, residual, gelu);
    cpu::LinearEpilogue ep;
    ep.residual = residual;
    ep.gelu = gelu;
    cpu::linear_forward_packed(x.data(), W.data(), packed.data(), b.data(), want.data(), N, in,
                               out, pool, ep);
    EXPECT_EQ(got, want) << "epilogue " << mode;
    if (mode == 0) {  // and the product is the product
      const auto ref = testref::linear(testref::to_double(x), testref::to_double(W),
                                       testref::to_double(b), N, in, out);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i])));
    }
  }
}
