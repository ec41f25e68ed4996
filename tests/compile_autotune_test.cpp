// The autotune harness (compile/autotune.h) on two generated GEMM variants and the library
// GEMM: all compiled, checked and timed; the winner is the lowest median and callable; a
// candidate that does not compile or gives a wrong result is reported and never chosen.
#include "core/isa.h"
#include "compile/autotune.h"
#include "compile/autotune_gemm.h"
#include "compile/capture.h"
#include "compile/passes/passes.h"
#include "compile/schedule.h"
#include "compile_test_config.h"
#include "compile/codegen_gemm.h"
#include "compile_jit_test_util.h"
#include "core/error.h"
#include "core/timer.h"
#include "kernels/cpu/linear.h"
#include "layers_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

struct Problem {
  static constexpr int64_t M = 32, N = 192, K = 64;
  std::vector<float> x = testref::random_floats(M * K, 21), W = testref::random_floats(N * K, 22),
                     b = testref::random_floats(N, 23), y = std::vector<float>(M * N);
  testref::Vec ref = testref::linear(testref::to_double(x), testref::to_double(W),
                                     testref::to_double(b), M, K, N);
  std::string check() const {
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(std::abs(y[i] - ref[i]) <= 1e-5 + 1e-5 * std::abs(ref[i])))
        return fmt::format("y[{}] = {}, want {}", i, y[i], ref[i]);
    return "";
  }
};

// A generated GEMM variant as a candidate: its own source, its packed weights.
AutotuneCandidate gemm_candidate(Problem& p, GemmSpec spec, const std::filesystem::path& dir,
                                 std::vector<std::shared_ptr<std::vector<float>>>& keep) {
  spec.M = Problem::M;
  spec.N = Problem::N;
  spec.K = Problem::K;
  const GeneratedGemm g = generate_gemm(spec);
  auto packed = std::make_shared<std::vector<float>>(g.packed_floats);
  gemm_pack_weights(g, p.W.data(), packed->data());
  keep.push_back(packed);
  AutotuneCandidate c;
  c.label = "generated " + g.name;
  c.request.source = gemm_source(spec);
  c.request.name = g.name;
  c.request.cache_dir = dir;
  c.symbol = g.name;
  c.call = [&p, packed, tasks = g.tasks](void* fn) {
    reinterpret_cast<GemmFn>(fn)(p.x.data(), packed->data(), p.b.data(), nullptr, p.y.data(), 0, tasks);
  };
  c.check = [&p] { return p.check(); };
  return c;
}

}  // namespace

TEST(CompileAutotune, PicksTheLowestMedianOfWorkingCandidates) {
  if (active_isa() != Isa::Avx512)  // its sources are AVX-512 by name; the JIT compiles for MINIGPT_ISA
    GTEST_SKIP() << "generates AVX-512 code; MINIGPT_ISA=" << isa_name(active_isa()) << " forbids it";
  testjit::TempCacheDir dir;
  Problem p;
  ThreadPool pool(1);
  std::vector<std::shared_ptr<std::vector<float>>> keep;
  std::vector<AutotuneCandidate> cands;

  cands.push_back(gemm_candidate(p, {}, dir.path(), keep));  // the default schedule
  GemmSpec narrow;  // one accumulator per tile: a latency-bound variant
  narrow.mr = 1;
  narrow.nv = 1;
  narrow.ksplit = 1;
  cands.push_back(gemm_candidate(p, narrow, dir.path(), keep));

  std::vector<float> lib_packed(static_cast<size_t>(cpu::linear_packed_floats(Problem::K, Problem::N)));
  cpu::linear_pack_weights(p.W.data(), lib_packed.data(), Problem::K, Problem::N);
  AutotuneCandidate library;
  library.label = "library linear_forward_packed";
  library.call = [&](void* fn) {
    EXPECT_EQ(fn, nullptr);
    cpu::linear_forward_packed(p.x.data(), p.W.data(), lib_packed.data(), p.b.data(), p.y.data(),
                               Problem::M, Problem::K, Problem::N, pool);
  };
  library.check = [&p] { return p.check(); };
  cands.push_back(library);

  AutotuneCandidate slow;  // right, but 300 us a call: never the fastest
  slow.label = "spin 300 us";
  slow.call = [&](void*) {
    cands[2].call(nullptr);
    const Timer t;
    while (t.elapsed_us() < 300) {
    }
  };
  slow.check = [&p] { return p.check(); };
  cands.push_back(slow);

  AutotuneCandidate broken = cands[0];  // does not compile
  broken.label = "broken source";
  broken.request.source += "\nstatic_assert(false, \"variant out of registers\");\n";
  cands.push_back(broken);

  AutotuneCandidate wrong;  // runs, but writes zeros
  wrong.label = "wrong result";
  wrong.call = [&p](void*) { std::fill(p.y.begin(), p.y.end(), 0.0f); };
  wrong.check = [&p] { return p.check(); };
  cands.push_back(wrong);

  AutotuneOptions opt;
  opt.rounds = 7;
  opt.min_sample_us = 5;
  const AutotuneResult r = autotune(cands, opt);

  ASSERT_EQ(r.timings.size(), cands.size());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r.timings[i].error.empty()) << r.timings[i].label << ": " << r.timings[i].error;
    EXPECT_GT(r.timings[i].median_us, 0) << r.timings[i].label;
    EXPECT_LE(r.timings[i].min_us, r.timings[i].median_us);
    EXPECT_GE(r.timings[i].inner, 1);
  }
  EXPECT_NE(r.timings[4].error.find("variant out of registers"), std::string::npos) << r.timings[4].error;
  EXPECT_NE(r.timings[5].error.find("wrong result"), std::string::npos) << r.timings[5].error;
  EXPECT_EQ(r.timings[4].median_us, 0);

  ASSERT_GE(r.best, 0);
  EXPECT_LT(r.best, 3) << "the 300 us candidate or a dropped one was chosen";
  for (int i = 0; i < 4; ++i) EXPECT_LE(r.timings[r.best].median_us, r.timings[i].median_us);
  EXPECT_GE(r.timings[3].median_us, 300);

  // The winner is usable: its library is held and its function gives the right answer.
  if (r.best < 2) {
    ASSERT_NE(r.fn, nullptr);
    ASSERT_NE(r.library, nullptr);
  } else {
    EXPECT_EQ(r.fn, nullptr);
  }
  std::fill(p.y.begin(), p.y.end(), NAN);
  cands[r.best].call(r.fn);
  EXPECT_EQ(p.check(), "");

  const std::string table = r.table();
  std::printf("%s", table.c_str());  // for the reader of the test log
  for (const auto& c : cands) EXPECT_NE(table.find(c.label), std::string::npos) << table;
  EXPECT_NE(table.find("**chosen**"), std::string::npos) << table;
  EXPECT_NE(table.find("dropped"), std::string::npos) << table;
}

TEST(CompileAutotune, NothingToChooseIsAnError) {
  EXPECT_THROW(autotune({}), Error);
  AutotuneCandidate wrong;
  wrong.label = "always wrong";
  wrong.call = [](void*) {};
  wrong.check = [] { return std::string("no"); };
  EXPECT_THROW(autotune({wrong}), Error);
}

TEST(CompileAutotune, FmaPeakIsMeasured) {
  if (active_isa() < Isa::Avx2)  // its sources use AVX2 by name; the JIT compiles for MINIGPT_ISA
    GTEST_SKIP() << "generates AVX2 code; MINIGPT_ISA=" << isa_name(active_isa()) << " forbids it";
  testjit::TempCacheDir dir;
  const FmaPeak& peak = fma_peak(dir.path());
  EXPECT_TRUE(peak.isa == "avx512" || peak.isa == "avx2") << peak.isa;
  EXPECT_GT(peak.gflops, 1.0);  // a core of the last decade does tens to hundreds
  EXPECT_EQ(&fma_peak(), &peak) << "measured once per process";
}

// max-autotune of one Linear (autotune_gemm.h): every variant of one source, with the library
// GEMM, on 1 and 2 threads; the choice, run again, agrees with the library within 1e-5.
TEST(CompileAutotune, GemmChoiceOnOneAndTwoThreads) {
  if (active_isa() != Isa::Avx512)  // its sources are AVX-512 by name; the JIT compiles for MINIGPT_ISA
    GTEST_SKIP() << "generates AVX-512 code; MINIGPT_ISA=" << isa_name(active_isa()) << " forbids it";
  testjit::TempCacheDir dir;
  const int64_t M = 32, N = 64, K = 64;
  const auto W = testref::random_floats(N * K, 31), b = testref::random_floats(N, 32);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    GemmProblem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.epilogue = GemmEpilogueKind::kResidual;
    p.W = W.data();
    p.b = b.data();
    p.pool = &pool;
    const auto variants = gemm_variants(M, N, K, p.epilogue, true);
    ASSERT_GE(variants.size(), 3u);
    AutotuneOptions opt;
    opt.rounds = 5;
    opt.min_sample_us = 5;
    const GemmChoice c = autotune_gemm(p, variants, opt, dir.path());
    const size_t expected = variants.size() * (threads > 1 ? 2 : 1) + 1;
    ASSERT_EQ(c.result.timings.size(), expected) << c.result.table();
    for (const AutotuneTiming& t : c.result.timings) EXPECT_EQ(t.error, "") << t.label;
    int compiled = 0;
    for (const AutotuneTiming& t : c.result.timings) compiled += t.compile_s > 0;
    EXPECT_LE(compiled, 1) << "one source, compiled at most once (a second pool size hits)";
    std::printf("%d thread(s):\n%s", threads, c.result.table().c_str());
    if (c.library) continue;
    EXPECT_EQ(c.threaded, c.result.timings[c.result.best].label.find("split") != std::string::npos);
    EXPECT_EQ(c.spec.M, M);
    EXPECT_FALSE(c.spec.name.empty());
  }
  EXPECT_THROW(autotune_gemm(GemmProblem{}, {}), Error);
}

// max-autotune of a whole graph's GEMMs (autotune_graph_gemms): one pick per distinct shape, a
// second call reads the picks back from the cache folder (no re-timing), a corrupt picks file
// is re-tuned, not trusted; and a pick of the engine's GEMM is honoured by the schedule.
TEST(CompileAutotune, GraphGemmPicksAreTunedOnceAndKept) {
  if (active_isa() != Isa::Avx512)
    GTEST_SKIP() << "generates AVX-512 code; MINIGPT_ISA=" << isa_name(active_isa()) << " forbids it";
  testjit::TempCacheDir dir;
  const Graph g = run_passes(capture_gpt(compile_tiny_config(), 2, 8));
  std::map<std::string, std::vector<float>> weights;
  auto weight = [&](const std::string& name) -> const float* {
    for (int t : g.weights)
      if (g.tensor(t).name == name) {
        auto& w = weights[name];
        if (w.empty()) w = testref::random_floats(g.tensor(t).numel(), 41 + static_cast<int>(weights.size()));
        return w.data();
      }
    ADD_FAILURE() << "no weight " << name;
    return nullptr;
  };
  AutotuneOptions opt;
  opt.rounds = 3;
  opt.min_sample_us = 5;
  std::string report;
  const std::vector<GemmPick> picks = autotune_graph_gemms(g, weight, opt, dir.path(), &report);
  for (const Node& n : g.nodes)
    if (n.op == Op::Matmul && !gemm_find_pick(picks, matmul_gemm_shape(g, n))) ADD_FAILURE() << "a matmul without a pick";
  EXPECT_EQ(report.find("picks read"), std::string::npos) << report;
  std::string again;
  const std::vector<GemmPick> kept = autotune_graph_gemms(g, weight, opt, dir.path(), &again);
  EXPECT_NE(again.find("picks read"), std::string::npos) << again;
  ASSERT_EQ(kept.size(), picks.size());
  for (size_t i = 0; i < picks.size(); ++i) {
    EXPECT_EQ(kept[i].engine, picks[i].engine);
    EXPECT_EQ(kept[i].spec.name, picks[i].spec.name);
  }
  // corrupt every picks file: re-tuned
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().extension() == ".gemm_picks") {
      std::ofstream out(e.path(), std::ios::trunc);
      out << "0 99 99 1 1\n";
    }
  std::string retuned;
  EXPECT_EQ(autotune_graph_gemms(g, weight, opt, dir.path(), &retuned).size(), picks.size());
  EXPECT_EQ(retuned.find("picks read"), std::string::npos) << retuned;
  // an engine pick for the first shape: that matmul is an extern_linear, whatever the backend
  std::vector<GemmPick> engine{picks[0]};
  engine[0].engine = true;
  const Schedule s = schedule(g, GemmBackend::kGenerated, engine);
  int externs = 0;
  for (const Kernel& k : s.kernels)
    if (k.kind == KernelKind::Matmul) {
      const bool picked = gemm_same_shape(matmul_gemm_shape(g, g.nodes[static_cast<size_t>(k.nodes[0])]), engine[0].spec);
      EXPECT_EQ(k.name.rfind(picked ? "extern_linear" : "cpp_gemm", 0), 0u) << k.name;
      externs += picked;
    }
  EXPECT_GT(externs, 0);
}
