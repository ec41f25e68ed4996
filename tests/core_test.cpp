// Core: tensor shapes and views, overflow-checked sizes, the deterministic thread pool, the
// MINIGPT_ISA switch.
#include "core/error.h"
#include "core/isa.h"
#include "core/report.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

#include "expect_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

using namespace minigpt;

TEST(Tensor, ShapeStridesAndViews) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  std::iota(t.span().begin(), t.span().end(), 0.0f);
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.at({5, 3}), 23.0f);
  Tensor rows = v.narrow0(2, 4);
  EXPECT_EQ(rows.numel(), 8);
  EXPECT_EQ(rows.at({0, 0}), 8.0f);
  Tensor c = t.clone();
  t.fill(-1.0f);
  EXPECT_EQ(c.at({1, 2, 3}), 23.0f);
}

TEST(Tensor, RejectsBadShapesWithClearErrors) {
  EXPECT_ERROR(Tensor::empty({-1, 3}), "negative dimension -1 in shape (-1, 3)");
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_ERROR(shape_numel({big, 4}), "overflows a 64-bit element count");
  EXPECT_ERROR(Tensor::empty({0, int64_t{1} << 32, int64_t{1} << 32}), "shape (0, 4294967296, 4294967296) overflows a 64-bit element count");  // 0 elements, overflowing strides
  EXPECT_EQ(shape_numel({0, 1 << 20, 1 << 20}), 0);
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_ERROR(t.view({4, 2}), "cannot view (2, 3) as (4, 2)");
  EXPECT_ERROR(t.at({2, 0}), "index 2 out of range for dimension 0 of (2, 3)");
  try {
    check_shape(t, {3, 2}, "blocks.0.ln1.weight");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.ln1.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(3, 2)"), std::string::npos);
  }
}

TEST(Tensor, EmptyTensorIsValid) {
  Tensor t = Tensor::empty({0, 600});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.span().size(), 0u);
}

TEST(ThreadPool, CoversEveryIndexOnceWithFixedChunks) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
  int64_t b, e;
  chunk_range(10, 3, 0, b, e);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 4);
  chunk_range(10, 3, 2, b, e);
  EXPECT_EQ(b, 7);
  EXPECT_EQ(e, 10);
}

// Jobs of 1..threads chunks back to back: workers without a chunk are not waited for, so a
// worker may still be looking at one job's word while the caller publishes the next. Every
// job must still run each of its chunks exactly once, whether the workers are polling (jobs
// back to back) or asleep (a pause longer than the pool's spin between some of them).
TEST(ThreadPool, JobsOfFewChunksAndManyInterleave) {
  constexpr int kThreads = 6;
  ThreadPool pool(kThreads);
  for (int job = 0; job < 3000; ++job) {
    const int chunks = 1 + (job * 7) % kThreads;
    const int64_t n = 100 * chunks;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> calls = 0;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      calls++;
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    }, 100);
    ASSERT_EQ(calls.load(), chunks) << "job " << job;
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "job " << job;
    if (job % 500 == 499)
      std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicros));
  }
}

TEST(ThreadPool, RethrowsWorkerErrors) {
  ThreadPool pool(2);
  EXPECT_ERROR(pool.parallel_for(100, [](int64_t b, int64_t) {
    if (b > 0) MINIGPT_FAIL("boom");
  }), "boom");
  // The pool is still usable afterwards.
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(100, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

TEST(Report, RendersAllFormats) {
  Report r("softmax", {"B", "V", "us"}, 2);
  r.add_row({64, 600, 1.2345678});
  EXPECT_NE(r.render(ReportFormat::Markdown).find("| 64 | 600 | 1.235 |"), std::string::npos);
  EXPECT_NE(r.render(ReportFormat::Csv).find("B,V,us\n64,600,1.235"), std::string::npos);
  EXPECT_NE(r.render(ReportFormat::Csv).find("# machine: "), std::string::npos);
  auto j = nlohmann::json::parse(r.render(ReportFormat::Json));
  EXPECT_EQ(j["rows"][0]["V"], 600);
  EXPECT_TRUE(j["meta"].contains("machine"));
  EXPECT_ERROR(parse_report_format("xml"), "unknown output format 'xml' (expected md, json or csv)");
  EXPECT_ERROR(r.add_row({1}), "report row has 1 cells for 3 columns");
}

TEST(Isa, NamesParseAndTheActiveOneIsSupported) {
  const std::vector<Isa> isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);  // scalar runs everywhere
  for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    const bool listed = std::find(isas.begin(), isas.end(), isa) != isas.end();
    EXPECT_EQ(cpu_supports(isa), listed) << isa_name(isa);
    if (listed) {
      EXPECT_EQ(isa_from_env_value(isa_name(isa)), isa);
    }
  }
  EXPECT_EQ(std::string(isa_name(Isa::Avx512)), "avx512");
  // Unset or empty: the best the CPU has.
  EXPECT_EQ(isa_from_env_value(nullptr), isas.back());
  EXPECT_EQ(isa_from_env_value(""), isas.back());
  EXPECT_TRUE(cpu_supports(active_isa()));
  const char* env = std::getenv("MINIGPT_ISA");
  if (env && *env) {
    EXPECT_EQ(std::string(isa_name(active_isa())), env);
  }
}

TEST(Isa, UnknownOrUnsupportedNamesAreErrorsNamingTheValueAndTheCpu) {
  EXPECT_ERROR(isa_from_env_value("avx9000"), "MINIGPT_ISA=avx9000: unknown instruction set");
  EXPECT_ERROR(isa_from_env_value("AVX2"), "use one of scalar, avx2, avx512");
  EXPECT_ERROR(isa_from_env_value("sse"), "this CPU has: scalar");
  for (const Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) {
      EXPECT_ERROR(isa_from_env_value(isa_name(isa)), "this CPU does not support");
    }
  }
}
