// The CUDA softmax family (naive, smem, every fused variant and autotune candidate) against
// cpu::softmax_reference: odd and misaligned shapes, in place, B = 0, the special values of
// docs/ARCHITECTURE.md, outputs poisoned with NaN first so that every element must be written. Each test
// that launches a kernel skips when no GPU is visible; the argument checks run everywhere.
//
// Tolerance: relative, per element, so that the smallest probabilities are checked as closely
// as the largest (an absolute 1e-6 left 37% of a V = 600 row unchecked: a kernel writing 0
// below 1e-6 passed). With u = 2^-24 (the relative rounding of one float operation) and m the
// row's max, an element passes when
//     |y - ref| <= ref * (sum_rtol + 8 u + 2 |x - m| u) + 2^-126, where
//   8 u          one element's own arithmetic: its exp (ex2.approx or expf, 2 ulp = 4 u), the
//                reciprocal of the sum (1 u), the product (1 u), the reference's rounding of
//                its double result to float (1 u), and 1 u spare;
//   2 |x - m| u  x - m rounded in float (the reference subtracts in double) and, in exp_le0,
//                its product with log2(e): each an absolute error of |x - m| u in the exponent;
//   2^-126       ex2.approx.ftz flushes results below FLT_MIN to 0;
//   sum_rtol     the row sum's relative error (sum_rtol below, per kernel).
#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "expect_error.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/autotune.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace minigpt;
using namespace minigpt::cuda;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using Launch = std::function<void(const float*, float*, int64_t, int64_t, cudaStream_t)>;

constexpr double kU = 1.0 / (1 << 24);  // u: half an ulp at 1

// The relative error of a row sum of `cols` positive terms taken by `threads` float
// accumulators, each summing its ceil(cols / threads) terms in order, then combined in a tree
// of ceil(log2(threads)) levels:
//   - one accumulator, n terms in order: each add rounds once, at most (n - 1) u in all (the
//     first-order worst case for positive terms) -> n u;
//   - each combine of two partial sums rescales both (exp_le0 of the max difference, 4 u, and
//     a product, 1 u) and adds them (1 u) -> 8 u a level with 2 u spare.
// The naive kernel (one thread per row, in order) is the exception: n u at V = 50257 would be
// 3e-3 while it measures 5e-5 on the H200 (test_softmax_cuda_into.py); exps of uniform [-8, 8]
// below the running sum's half-ulp are lost, a loss of one sign that grows ~linearly with V,
// so its bound is V u / 4: 4x that measurement at V = 50257.
double sum_rtol(int64_t cols, int64_t threads) {
  if (threads == 1) return static_cast<double>(cols) * kU / 4;
  const double per_thread = std::ceil(static_cast<double>(cols) / static_cast<double>(threads));
  return (per_thread + 8 * std::ceil(std::log2(static_cast<double>(threads)))) * kU;
}

struct Named {
  std::string name;
  Launch run;
  int64_t threads;  // float accumulators per row (sum_rtol)
};

// Threads that share one row in a fused config: a sub-warp (Rows), a block, or a cluster of
// blocks (Block, Bulk).
int64_t row_threads(const FusedConfig& c) {
  const bool clustered = c.variant == FusedVariant::Block || c.variant == FusedVariant::Bulk;
  return static_cast<int64_t>(c.threads_per_row) * (clustered ? c.cluster : 1);
}

Named fused_named(const FusedConfig& c) {
  return {"fused " + c.name(),
          [c](const float* x, float* y, int64_t r, int64_t v, cudaStream_t s) { softmax_fused(x, y, r, v, c, s); },
          row_threads(c)};
}

constexpr int64_t kSmemKernelThreads = 256;  // softmax_smem.cu: one block of 256 per row

std::vector<Named> fixed_kernels(int64_t cols) {
  return {
      {"naive", softmax_naive, 1},
      {"smem", softmax_smem, kSmemKernelThreads},
      fused_named(fused_default_config(cols, fused_limits())),
  };
}

// Device scratch with room for offsets (misaligned views).
struct Dev {
  float* p = nullptr;
  explicit Dev(size_t n) { MINIGPT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), (n + 8) * sizeof(float))); }
  ~Dev() { cudaFree(p); }
};

std::vector<float> random_rows(int64_t rows, int64_t cols, uint32_t seed, float scale = 8.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = u(gen);
  return x;
}

// Runs `k` on x with the given element offsets of x and y inside their buffers (y poisoned with
// NaN first) and returns y.
std::vector<float> run(const Launch& k, const std::vector<float>& x, int64_t rows, int64_t cols,
                       int x_off = 0, int y_off = 0, bool in_place = false) {
  const size_t n = x.size();
  Dev dx(n), dy(n);
  float* xp = dx.p + x_off;
  float* yp = in_place ? xp : dy.p + y_off;
  MINIGPT_CUDA_CHECK(cudaMemset(dy.p, 0xff, (n + 8) * sizeof(float)));  // NaN everywhere
  MINIGPT_CUDA_CHECK(cudaMemcpy(xp, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  k(xp, yp, rows, cols, nullptr);
  MINIGPT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y(n);
  MINIGPT_CUDA_CHECK(cudaMemcpy(y.data(), yp, n * sizeof(float), cudaMemcpyDeviceToHost));
  return y;
}

// Every element written (NaN exactly where the reference has NaN) and within the relative
// tolerance of the file header, sum_rtol(cols, threads) for the kernel's sum. Prints the worst
// error as a fraction of the allowed one (a few tenths is the expected margin).
::testing::AssertionResult matches_reference(const std::vector<float>& x, const std::vector<float>& y,
                                             int64_t rows, int64_t cols, int64_t threads) {
  std::vector<float> ref(x.size());
  cpu::softmax_reference(x.data(), ref.data(), rows, cols);
  const double rtol = sum_rtol(cols, threads) + 8 * kU;
  const double flush = std::ldexp(1.0, -126);
  double worst = 0, worst_rel = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float m = -kInf;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[static_cast<size_t>(r * cols + c)]);  // NaN skipped
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      if (std::isnan(ref[i]) != std::isnan(y[i]))
        return ::testing::AssertionFailure() << "element (" << r << ", " << c << "): " << y[i]
                                             << " vs reference " << ref[i];
      if (std::isnan(ref[i])) continue;
      const double d = std::abs(static_cast<double>(y[i]) - ref[i]);
      // -inf entries (ref 0) and rows whose max is infinite: no exponent error term.
      const double cond = std::isfinite(x[i]) && std::isfinite(m) ? 2 * std::abs(static_cast<double>(x[i]) - m) * kU : 0.0;
      const double tol = ref[i] * (rtol + cond) + flush;
      if (!(d <= tol))
        return ::testing::AssertionFailure() << "element (" << r << ", " << c << "): " << y[i]
                                             << " vs reference " << ref[i] << ", relative error "
                                             << d / ref[i] << ", allowed " << tol / ref[i];
      worst = std::max(worst, d / tol);
      if (ref[i] > 0) worst_rel = std::max(worst_rel, d / ref[i]);
    }
  }
  std::printf("  V=%-7lld threads %-5lld max relative error %.3g, %.2f of the bound\n",
              static_cast<long long>(cols), static_cast<long long>(threads), worst_rel, worst);
  return ::testing::AssertionSuccess();
}

TEST(SoftmaxCuda, EveryKernelMatchesTheReferenceAtOddShapes) {
  REQUIRE_GPU();
  for (int64_t cols : {1, 3, 600, 601, 2049, 32000, 50257}) {
    for (int64_t rows : {1, 7, 64}) {
      if (rows * cols > 4'000'000) continue;
      const auto x = random_rows(rows, cols, static_cast<uint32_t>(rows * 131 + cols));
      for (const Named& k : fixed_kernels(cols))
        EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols), rows, cols, k.threads))
            << k.name << " at (" << rows << ", " << cols << ")";
    }
  }
}

TEST(SoftmaxCuda, MisalignedAndInPlace) {
  REQUIRE_GPU();
  for (int64_t cols : {3, 600, 601, 5000, 50257}) {
    const int64_t rows = 5;
    const auto x = random_rows(rows, cols, static_cast<uint32_t>(cols));
    for (const Named& k : fixed_kernels(cols)) {
      for (auto [xo, yo] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{1, 2}, std::pair{0, 3}})
        EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols, xo, yo), rows, cols, k.threads))
            << k.name << " V=" << cols << " x+" << xo << " y+" << yo;
      EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols, 1, 0, /*in_place=*/true), rows, cols, k.threads))
          << k.name << " in place, V=" << cols;
    }
  }
}

TEST(SoftmaxCuda, EmptyBatchLaunchesNothing) {
  REQUIRE_GPU();
  for (const Named& k : fixed_kernels(600)) {
    EXPECT_NO_THROW(k.run(nullptr, nullptr, 0, 600, nullptr)) << k.name;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

// The launchers check their arguments before touching the device: no GPU needed.
TEST(SoftmaxCuda, BadShapesAreErrorsNamingTheShape) {
  EXPECT_ERROR(softmax_naive(nullptr, nullptr, 1, 0, nullptr), "softmax_naive: bad shape (1, 0)");
  EXPECT_ERROR(softmax_fused(nullptr, nullptr, -1, 5, FusedConfig{}, nullptr), "bad shape (-1, 5)");
}

// Rows of special values at positions that land in different threads, for every variant.
TEST(SoftmaxCuda, SpecialValuesAsOnTheCpu) {
  REQUIRE_GPU();
  for (int64_t cols : {3, 600, 5000, 50257}) {
    const int64_t rows = 6;
    auto x = random_rows(rows, cols, 7);
    auto at = [&](int64_t r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c)]; };
    at(0, cols / 2) = kNaN;                                  // NaN -> NaN row
    at(1, cols - 1) = kInf;                                  // +inf -> NaN row
    for (int64_t c = 0; c < cols; ++c) at(2, c) = -kInf;     // all -inf -> NaN row
    for (int64_t c = 0; c < cols; ++c) at(3, c) = -kInf;     // [1e30, 0, -1e30, -inf...] -> [1, 0, 0...]
    at(3, 0) = 1e30f, at(3, 1 % cols) = cols > 1 ? 0.f : 1e30f, at(3, 2 % cols) = cols > 2 ? -1e30f : at(3, 2 % cols);
    for (int64_t c = 0; c < cols; c += 2) at(4, c) = -kInf;  // -inf entries in a finite row -> 0
    at(5, cols - 1) = 1e30f;                                 // one huge value at the far end
    std::vector<Named> kernels = fixed_kernels(cols);
    for (const FusedConfig& c : fused_candidates(cols, fused_limits())) kernels.push_back(fused_named(c));
    for (const Named& k : kernels) {
      const auto y = run(k.run, x, rows, cols);
      EXPECT_TRUE(matches_reference(x, y, rows, cols, k.threads)) << k.name << " V=" << cols;
      for (int r = 0; r < 3; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_TRUE(std::isnan(y[static_cast<size_t>(r * cols + c)])) << k.name << " V=" << cols << " row " << r;
      ASSERT_EQ(y[static_cast<size_t>(3 * cols)], 1.f) << k.name << " V=" << cols;
      for (int64_t c = 1; c < cols; ++c) ASSERT_EQ(y[static_cast<size_t>(3 * cols + c)], 0.f) << k.name;
      for (int64_t c = 0; c < cols; c += 2) ASSERT_EQ(y[static_cast<size_t>(4 * cols + c)], 0.f) << k.name;
      ASSERT_EQ(y[static_cast<size_t>(5 * cols + cols - 1)], 1.f) << k.name;
    }
  }
}

// Every config the autotuner may pick is correct, aligned and not.
TEST(SoftmaxCuda, EveryAutotuneCandidateIsCorrect) {
  REQUIRE_GPU();
  for (int64_t cols : {1, 17, 600, 601, 2049, 32000, 50257, 70001}) {
    const int64_t rows = 9;
    const auto x = random_rows(rows, cols, static_cast<uint32_t>(cols + 5));
    const auto cands = fused_candidates(cols, fused_limits());
    ASSERT_FALSE(cands.empty());
    for (const FusedConfig& c : cands) {
      const Named k = fused_named(c);
      EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols), rows, cols, k.threads)) << k.name << " V=" << cols;
      EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols, 1, 1), rows, cols, k.threads)) << k.name << " V=" << cols << " +1";
      EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols, 2, 1), rows, cols, k.threads)) << k.name << " V=" << cols << " +2/+1";
    }
  }
}

// The Bulk variant (slices copied into shared memory by cp.async.bulk) at every cluster size,
// in place (y == x: each block reads its whole slice before any block of its row writes) and
// out of place, rows at every 16-byte phase (V odd), slices of unequal length, and a row of
// special values in the middle of a batch.
TEST(SoftmaxCuda, BulkVariantInPlaceAtEveryClusterSize) {
  REQUIRE_GPU();
  const FusedLimits lim = fused_limits();
  for (int64_t cols : {4099, 50257, 70001}) {
    const int64_t rows = 6;
    auto x = random_rows(rows, cols, static_cast<uint32_t>(cols + 17));
    x[static_cast<size_t>(2 * cols + cols / 3)] = kNaN;  // row 2 -> NaN
    for (int cluster : {1, 2, 4, 8}) {
      for (int threads : {128, 1024}) {
        FusedConfig c;
        c.variant = FusedVariant::Bulk;
        c.threads_per_row = threads, c.cluster = cluster, c.vec = 4;
        if (!c.fits(cols, lim.smem_optin_bytes)) continue;
        const Named k = fused_named(c);
        for (int off : {0, 1, 3}) {
          const auto y = run(k.run, x, rows, cols, off, off);
          EXPECT_TRUE(matches_reference(x, y, rows, cols, k.threads)) << c.name() << " V=" << cols << " +" << off;
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(2 * cols)])) << c.name() << " V=" << cols;
          EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols, off, 0, /*in_place=*/true), rows, cols, k.threads))
              << c.name() << " in place, V=" << cols << " +" << off;
        }
      }
    }
  }
}

TEST(SoftmaxCuda, OnlineVariantHoldsRowsLongerThanAnyCache) {
  REQUIRE_GPU();
  FusedConfig c;
  c.variant = FusedVariant::Online;
  c.threads_per_row = 1024;
  const int64_t rows = 2, cols = 600'001;
  const auto x = random_rows(rows, cols, 3);
  const Named k = fused_named(c);
  EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols), rows, cols, k.threads));
}

TEST(SoftmaxCuda, AutotunerCachesAndRetunes) {
  REQUIRE_GPU();
  const std::string dir = (std::filesystem::temp_directory_path() / ("minigpt_tune_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  AutotuneOptions o;
  o.cache_path = dir + "/autotune.json";
  o.launches_per_timing = 2;
  o.timings = 1;
  const int64_t rows = 256, cols = 600;
  const auto x = random_rows(rows, cols, 11);
  Dev dx(x.size());
  MINIGPT_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  const AutotuneResult first = autotune_fused(dx.p, rows, cols, o, nullptr);
  EXPECT_FALSE(first.from_cache);
  EXPECT_GT(first.candidates, 1);
  const AutotuneResult second = autotune_fused(dx.p, rows, cols, o, nullptr);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.config, first.config);
  o.retune = true;
  EXPECT_FALSE(autotune_fused(dx.p, rows, cols, o, nullptr).from_cache);
  // The winner is correct.
  const Named k = fused_named(first.config);
  EXPECT_TRUE(matches_reference(x, run(k.run, x, rows, cols), rows, cols, k.threads));
  std::filesystem::remove_all(dir);
}

}  // namespace
