// codegen_text.h's loops_key (the code generators' test for "these two kernels have the same
// code") against the std::regex form it replaced, kept here as the reference: the same key, byte
// for byte, on hand-written corner cases and on every kernel the CUDA and C++ back ends generate
// for the tiny model in several variants.
#include "compile/capture.h"
#include "compile/codegen_cpp.h"
#include "compile/codegen_cuda_mega.h"
#include "compile/codegen_text.h"
#include "compile/lower_cuda.h"
#include "compile_test_config.h"
#include "expect_error.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

// The regex form (codegen_text.cpp before the warm-compile work, 2026-12-02).
std::string loops_key_regex(std::string code, const std::string& kernel_name, const std::string& temp_prefixes) {
  for (size_t at = code.find(kernel_name); at != std::string::npos; at = code.find(kernel_name, at))
    code.replace(at, kernel_name.size(), "@");
  code = std::regex_replace(code, std::regex("//[^\n]*"), "");
  const std::regex temp("\\b(" + temp_prefixes + ")([0-9]+)\\b");
  std::map<std::string, int> local;
  std::string key;
  auto last = code.cbegin();
  for (auto it = std::sregex_iterator(code.begin(), code.end(), temp); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    key.append(last, m[0].first);
    const auto [slot, added] = local.emplace(m.str(), static_cast<int>(local.size()));
    key += m[1].str() + "$" + std::to_string(slot->second);
    last = m[0].second;
  }
  key.append(last, code.cend());
  return key;
}

void expect_same_key(const std::string& code, const std::string& name, const std::string& prefixes) {
  EXPECT_EQ(loops_key(code, name, prefixes), loops_key_regex(code, name, prefixes)) << "code:\n" << code;
}

}  // namespace

TEST(CompileLoopsKey, RenumbersTemporariesByFirstUse) {
  EXPECT_EQ(loops_key("float tmp7 = acc12 + tmp7; // tmp9\nk_0(tmp3);", "k_0", "acc|tmp"), "float tmp$0 = acc$1 + tmp$0; \n@(tmp$2);");
  // two blocks' kernels: the same key
  EXPECT_EQ(loops_key("void k_1() { float row11 = x[0]; }", "k_1", kCudaTempPrefixes),
            loops_key("void k_9() { float row95 = x[0]; }", "k_9", kCudaTempPrefixes));
  // different arithmetic: different keys
  EXPECT_NE(loops_key("float tmp1 = a + b;", "k", "tmp"), loops_key("float tmp1 = a - b;", "k", "tmp"));
}

TEST(CompileLoopsKey, MatchesTheRegexFormOnCornerCases) {
  const std::vector<std::string> cases{
      "",
      "tmp1",
      "tmp",
      "tmp1a tmp_2 _tmp3 atmp4 tmp5_ 5tmp6 tmp7.x tmp8[tmp9] (row10)",
      "rowv1 rowb2 row3 rowvx4 rowv rowbb5 acc6 tot7 tmp8",  // the C++ prefixes' order
      "v1 vi v12x x0 xx1 x_1 red9 rcp10 red rcpv1",          // the CUDA ones, single letters
      "a // comment tmp1\nb tmp2 // x3\n// whole line v4\n tmp2 tmp11",
      "// only a comment",
      "tmp1 // no newline at the end",
      "s = \"http://host\"; tmp4",
      "k_0 k_01 k_0k_0 @k_0 tmp1k_0",
      "\xc3\xa9tmp1 tmp2\xc3\xa9 tmp3\t\ntmp3\r\n",
  };
  for (const std::string& prefixes : {std::string("acc|tot|rowv|rowb|row|tmp"), std::string(kCudaTempPrefixes), std::string("row|rowv")})
    for (const std::string& c : cases) expect_same_key(c, "k_0", prefixes);
}

TEST(CompileLoopsKey, MatchesTheRegexFormOnGeneratedKernels) {
  const ModelConfig c = compile_tiny_config();
  int checked = 0;
  for (const Graph& g : {capture_gpt(c, 2, 16), capture_gpt_decode(c)}) {
    for (int variant = 0; variant < 4; ++variant) {
      CudaCodegenOptions cg;
      cg.generated_gemm = variant > 0;
      cg.pdl = variant == 2;
      cg.megakernel = variant == 3;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      for (const CudaKernelText& k : l.code.kernels) {
        expect_same_key(k.text, k.name, kCudaTempPrefixes);
        ++checked;
      }
    }
    CodegenOptions co;
    co.runtime_abi = "// abi\n";
    co.gemm = GemmBackend::kGenerated;
    for (const GeneratedKernel& k : generate_cpp(schedule(run_passes(g), co.gemm), co).kernels) {
      expect_same_key(k.text, k.name, "acc|tot|rowv|rowb|row|tmp");
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(CompileLoopsKey, RejectsAPrefixThatIsNotAWord) {
  EXPECT_ERROR(loops_key("x", "k", "tmp|"), "temporary prefix '' in 'tmp|' must start with a word character");
  EXPECT_ERROR(loops_key("x", "k", "(tmp"), "temporary prefix '(tmp'");
}
