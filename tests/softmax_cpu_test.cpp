// CPU softmax: every version (naive, fused, simd on every ISA this CPU has, streamed or not,
// prefetching or not, 1 and 2 threads) against softmax_reference (double) at many shapes,
// misaligned pointers, poisoned outputs, the docs/ARCHITECTURE.md special values; and the polynomial
// exp's ulp error.
//
// Tolerance per element, relative (the smallest probabilities are checked as closely as the
// largest): |y - ref| <= ref * (rtol + |x - max| u) + 2e-38, u = 2^-24 (one float rounding).
// The |x - max| u term is the rounding of x - max in float, which no float kernel avoids (the
// reference subtracts in double); 2e-38 covers exp_poly's flush of results below FLT_MIN.
// rtol (rtol_for), from the arithmetic, checked against the errors measured beyond that term
// (the test prints each version's worst as a fraction of its bound):
//   each element's own operations, 5 u: its exp (<= 1 ulp = 2 u: expf, or exp_poly's measured
//     0.882 ulp), the scale or division (1 u), the scale's rounding to float (1 u), the
//     reference's rounding of its double result (1 u). fused sums in double: this is all.
//   a float sum, + (n / 4 + 2 sqrt(n + log2 L)) u, for L accumulator lanes of n terms each,
//     summed in order, then a log2 L tree: naive L = 1, n = V; simd L = 1 (scalar), 16 (AVX2,
//     2 x 8) or 32 (AVX-512, 2 x 16) lanes, n = ceil(min(V, 2048) / L) within a 2048-float
//     chunk (chunks are combined in double). Two parts: exps below the running sum's half-ulp
//     are lost, a loss of one sign that grows linearly (the first-order worst case is n u; the
//     worst measured is n u / 16, scalar simd at V = 1724 with a random seed; naive at the fixed
//     shapes V u / 45 to V u / 22): n / 4 is 4x that; and roundings of either sign, which behave
//     as independent (Higham and Mary's probabilistic bound, sqrt(n) u, with a factor 2): AVX2
//     and AVX-512 measure 1.5-4 u at n <= 66 against their 10-21 u.
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/softmax.h"
#include "expect_error.h"
#include "kernels/cpu/softmax_simd_ops.h"  // kScratchFloats: test both sides of it

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace minigpt;
using namespace minigpt::cpu;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kEps24 = 1.0 / (1 << 24);  // half an ulp at 1

enum class SumKind { Double, FloatInOrder, FloatLanes };

struct Version {
  std::string name;
  SumKind sum;
  double lanes;  // FloatLanes: accumulator lanes of the ISA
  std::function<void(const float*, float*, int64_t, int64_t)> run;
};

// The chunk the simd kernel sums a lane's terms within (softmax.h kSimdChunk), written out so
// that changing the kernel's chunk means revisiting the bound it enters.
constexpr int64_t kBoundChunk = 2048;
static_assert(kSimdChunk == kBoundChunk, "softmax_simd's chunk changed: revisit rtol_for's sum bound");

double isa_lanes(Isa isa) { return isa == Isa::Scalar ? 1 : isa == Isa::Avx2 ? 16 : 32; }

// Every version, each thread count, store mode and prefetch, simd on the active ISA
// (core/isa.h: ctest runs this binary once per ISA the CPU has, with MINIGPT_ISA set).
std::vector<Version> versions(ThreadPool& pool1, ThreadPool& pool2) {
  std::vector<Version> v;
  v.push_back({"naive", SumKind::FloatInOrder, 1, [](const float* x, float* y, int64_t r, int64_t c) { softmax_naive(x, y, r, c); }});
  v.push_back({"fused", SumKind::Double, 1, [](const float* x, float* y, int64_t r, int64_t c) { softmax_fused(x, y, r, c); }});
  v.push_back({"simd(default,t2)", SumKind::FloatLanes, isa_lanes(active_isa()),
               [&pool2](const float* x, float* y, int64_t r, int64_t c) { softmax_simd(x, y, r, c, pool2); }});
  {
    const Isa isa = active_isa();
    // Each store mode with each prefetch setting forced (four instantiations of the row loop;
    // the scalar fallback has no prefetch, so it runs once per store mode).
    const auto prefetches = isa == Isa::Scalar ? std::vector<SimdMode>{SimdMode::Off}
                                               : std::vector<SimdMode>{SimdMode::Off, SimdMode::On};
    for (SimdMode stream : {SimdMode::Off, SimdMode::On})
      for (SimdMode prefetch : prefetches)
        for (ThreadPool* pool : {&pool1, &pool2}) {
          const std::string name = std::string("simd(") + isa_name(isa) +
                                   (stream == SimdMode::On ? ",stream" : "") +
                                   (prefetch == SimdMode::On ? ",prefetch" : "") + ",t" +
                                   std::to_string(pool->size()) + ")";
          v.push_back({name, SumKind::FloatLanes, isa_lanes(isa),
                       [isa, stream, prefetch, pool](const float* x, float* y, int64_t r, int64_t c) {
                         softmax_simd_with(isa, stream, prefetch, x, y, r, c, *pool);
                       }});
        }
  }
  return v;
}

// The bound of the file header for a row of `cols` values.
double rtol_for(const Version& v, int64_t cols) {
  const double element = 5 * kEps24;
  switch (v.sum) {
    case SumKind::Double: return element;
    case SumKind::FloatInOrder: {
      const double n = static_cast<double>(cols);
      return element + (n / 4 + 2 * std::sqrt(n)) * kEps24;
    }
    case SumKind::FloatLanes: {
      const double n = std::ceil(static_cast<double>(std::min(cols, kBoundChunk)) / v.lanes);
      return element + (n / 4 + 2 * std::sqrt(n + std::log2(v.lanes))) * kEps24;
    }
  }
  return 0;
}

// Random rows: N(0, 3) with, in some rows, a few -inf entries (masking) and one large value.
std::vector<float> random_input(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 3 == 1 && cols > 1) x[r * cols + col(rng)] = -kInf;
    if (r % 4 == 2) x[r * cols + col(rng)] += 40.0f;  // a dominant entry
  }
  return x;
}

// Checks y against the reference; returns the largest relative error beyond the x - max
// rounding term, as a fraction of rtol (1 = at the bound).
double check_close(const std::string& what, const float* x, const float* y, const float* ref,
                   int64_t rows, int64_t cols, double rtol) {
  double worst = 0.0;
  int reported = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float m = -kInf;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double d = std::abs(static_cast<double>(y[i]) - ref[i]);
      const double cond = std::isfinite(x[i]) ? std::abs(static_cast<double>(x[i]) - m) * kEps24 : 0.0;
      const double tol = ref[i] * (rtol + cond) + 2e-38;
      if (!(d <= tol)) {  // NaN fails
        if (reported++ < 5)
          ADD_FAILURE() << what << ": y[" << r << "," << c << "] = " << y[i] << ", reference "
                        << ref[i] << ", x = " << x[i] << ", relative error " << d / ref[i]
                        << ", allowed " << tol / ref[i];
      } else if (ref[i] > 1e-30) {
        worst = std::max(worst, std::max(0.0, d / ref[i] - cond) / rtol);
      }
    }
  }
  return worst;
}

struct RowsCols {  // not minigpt::Shape (core/tensor.h, which softmax_simd_ops.h includes)
  int64_t rows, cols;
};

}  // namespace

TEST(SoftmaxCpu, EveryVersionMatchesReferenceAtManyShapesAndMisalignedPointers) {
  ThreadPool pool1(1), pool2(2);
  const auto vs = versions(pool1, pool2);
  const std::vector<RowsCols> shapes = {{1, 1},   {5, 1},    {3, 3},    {7, 15},  {7, 16},
                                        {9, 17},  {64, 600}, {33, 601}, {5, 2048}, {5, 2049},
                                        {3, 4097}, {2, 32000}, {2, 50257}, {1, 70001}};
  std::vector<double> worst(vs.size(), 0.0);
  uint32_t seed = 1000;
  for (const RowsCols& s : shapes)
    for (int misalign : {0, 1}) {
      ++seed;
      SCOPED_TRACE("shape (" + std::to_string(s.rows) + ", " + std::to_string(s.cols) +
                   ") offset " + std::to_string(misalign) + " floats, seed " + std::to_string(seed));
      const int64_t n = s.rows * s.cols;
      const std::vector<float> x0 = random_input(s.rows, s.cols, seed);
      std::vector<float> ref(static_cast<size_t>(n));
      softmax_reference(x0.data(), ref.data(), s.rows, s.cols);
      // Buffers with room for the offset; the kernel sees x + misalign, y + misalign.
      std::vector<float> xbuf(static_cast<size_t>(n + 1)), ybuf(static_cast<size_t>(n + 1));
      std::copy(x0.begin(), x0.end(), xbuf.begin() + misalign);
      for (size_t k = 0; k < vs.size(); ++k) {
        std::fill(ybuf.begin(), ybuf.end(), kNaN);  // poison: an unwritten element fails
        vs[k].run(xbuf.data() + misalign, ybuf.data() + misalign, s.rows, s.cols);
        const double w = check_close(vs[k].name, x0.data(), ybuf.data() + misalign, ref.data(),
                                     s.rows, s.cols, rtol_for(vs[k], s.cols));
        if (std::getenv("SOFTMAX_TEST_VERBOSE"))
          std::printf("    %-30s V=%-6lld %.3f of its bound\n", vs[k].name.c_str(), static_cast<long long>(s.cols), w);
        worst[k] = std::max(worst[k], w);
      }
    }
  for (size_t k = 0; k < vs.size(); ++k)
    std::printf("  %-30s worst error %.2f of its bound\n", vs[k].name.c_str(), worst[k]);
}

// Rows whose running max rises many times: the online versions rescale at every rise (fused
// keeps one stretch of y per rise and scales each once at the end). Rising by small steps
// (every element a new max), a sawtooth that climbs, and a rise after a long flat start.
TEST(SoftmaxCpu, RowsWhoseMaxRisesOftenOnEveryVersion) {
  ThreadPool pool1(1), pool2(2);
  const auto vs = versions(pool1, pool2);
  struct Row {
    std::string name;
    std::vector<float> x;
  };
  std::vector<Row> rows;
  for (const int64_t cols : {int64_t{100}, int64_t{5000}, 2 * kSimdChunk + 3}) {
    Row rising{"rising, " + std::to_string(cols), std::vector<float>(static_cast<size_t>(cols))};
    for (int64_t c = 0; c < cols; ++c) rising.x[c] = -8.0f + 16.0f * static_cast<float>(c) / static_cast<float>(cols);
    rows.push_back(rising);
    Row saw{"climbing sawtooth, " + std::to_string(cols), std::vector<float>(static_cast<size_t>(cols))};
    for (int64_t c = 0; c < cols; ++c) saw.x[c] = 0.01f * static_cast<float>(c) - static_cast<float>(c % 7);
    rows.push_back(saw);
    Row late{"flat, then rising, " + std::to_string(cols), std::vector<float>(static_cast<size_t>(cols), -30.0f)};
    for (int64_t c = cols / 2; c < cols; ++c) late.x[c] = -30.0f + 0.05f * static_cast<float>(c - cols / 2);
    rows.push_back(late);
  }
  for (const Row& r : rows) {
    const auto cols = static_cast<int64_t>(r.x.size());
    std::vector<float> ref(r.x.size()), y(r.x.size());
    softmax_reference(r.x.data(), ref.data(), 1, cols);
    for (const Version& v : vs) {
      SCOPED_TRACE(r.name + " / " + v.name);
      std::fill(y.begin(), y.end(), kNaN);  // poison: an unwritten element fails
      v.run(r.x.data(), y.data(), 1, cols);
      check_close(v.name, r.x.data(), y.data(), ref.data(), 1, cols, rtol_for(v, cols));
    }
  }
}

TEST(SoftmaxCpu, VariedSeedsPrintTheirSeed) {
  ThreadPool pool1(1), pool2(2);
  const auto vs = versions(pool1, pool2);
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    const int64_t cols = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
    SCOPED_TRACE("shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    const std::vector<float> x = random_input(rows, cols, static_cast<uint32_t>(rng()));
    std::vector<float> ref(static_cast<size_t>(rows * cols)), y(ref.size());
    softmax_reference(x.data(), ref.data(), rows, cols);
    for (const Version& v : vs) {
      std::fill(y.begin(), y.end(), kNaN);
      v.run(x.data(), y.data(), rows, cols);
      check_close(v.name, x.data(), y.data(), ref.data(), rows, cols, rtol_for(v, cols));
    }
  }
}

TEST(SoftmaxCpu, SpecialValuesOnEveryVersion) {
  ThreadPool pool1(1), pool2(2);
  auto vs = versions(pool1, pool2);
  vs.insert(vs.begin(), {"reference", SumKind::Double, 1, [](const float* x, float* y, int64_t r, int64_t c) {
                           softmax_reference(x, y, r, c);
                         }});
  struct Case {
    std::string name;
    std::vector<float> row;
    std::vector<float> expect;  // empty: every element NaN
  };
  std::vector<Case> cases = {
      {"nan", {1.0f, kNaN, 2.0f}, {}},
      {"nan first", {kNaN, 1.0f, 2.0f}, {}},
      {"nan only", {kNaN}, {}},
      {"+inf", {1.0f, kInf, 0.0f}, {}},
      {"+inf and nan", {kInf, kNaN}, {}},
      {"two +inf", {kInf, kInf, 1.0f}, {}},
      {"all -inf", {-kInf, -kInf, -kInf}, {}},
      {"one -inf", {-kInf}, {}},
      {"nan and -inf", {-kInf, kNaN, -kInf}, {}},
      {"1e30, 0, -1e30", {1e30f, 0.0f, -1e30f}, {1.0f, 0.0f, 0.0f}},
      {"-inf masked", {-kInf, 0.0f, -kInf}, {0.0f, 1.0f, 0.0f}},
      {"single", {5.0f}, {1.0f}},
      {"+-max float", {3.4e38f, -3.4e38f}, {1.0f, 0.0f}},
  };
  // Long rows that cross the simd chunk boundary: the tricky cases for the online rescaling.
  // Both lengths: rows kept in simd's scratch, and rows too long for it (exp recomputed).
  for (const int64_t L : {3 * kSimdChunk + 5, detail::kScratchFloats + 3 * kSimdChunk + 5}) {
    {
      Case c{"L=" + std::to_string(L) + ": first chunk all -inf, then finite", std::vector<float>(L, -kInf), {}};
      c.row[L - 2] = 0.0f;
      c.expect = std::vector<float>(L, 0.0f);
      c.expect[L - 2] = 1.0f;
      cases.push_back(c);
    }
    {
      Case c{"L=" + std::to_string(L) + ": first chunk -inf and NaN, then finite", std::vector<float>(L, -kInf), {}};
      c.row[3] = kNaN;
      c.row[L - 2] = 0.0f;
      cases.push_back(c);
    }
    {
      Case c{"L=" + std::to_string(L) + ": NaN in the last chunk", std::vector<float>(L, 1.0f), {}};
      c.row[L - 1] = kNaN;
      cases.push_back(c);
    }
    {
      Case c{"L=" + std::to_string(L) + ": +inf in the middle", std::vector<float>(L, 1.0f), {}};
      c.row[kSimdChunk + 7] = kInf;
      cases.push_back(c);
    }
    {
      Case c{"L=" + std::to_string(L) + ": all -inf", std::vector<float>(L, -kInf), {}};
      cases.push_back(c);
    }
    {
      Case c{"L=" + std::to_string(L) + ": 1e30 late", std::vector<float>(L, -1e30f), {}};
      c.row[2 * kSimdChunk + 1] = 1e30f;
      c.expect = std::vector<float>(L, 0.0f);
      c.expect[2 * kSimdChunk + 1] = 1.0f;
      cases.push_back(c);
    }
  }
  for (const Case& c : cases) {
    // Three rows: a normal row, the case, a normal row; the neighbours must be untouched by it.
    const int64_t cols = static_cast<int64_t>(c.row.size());
    std::vector<float> x(3 * c.row.size());
    for (int64_t i = 0; i < cols; ++i) {
      x[i] = static_cast<float>(i % 7);
      x[cols + i] = c.row[i];
      x[2 * cols + i] = -static_cast<float>(i % 5);
    }
    std::vector<float> ref(x.size());
    softmax_reference(x.data(), ref.data(), 3, cols);
    for (const Version& v : vs) {
      SCOPED_TRACE(c.name + " / " + v.name);
      std::vector<float> y(x.size(), -7.0f);  // poison with a non-NaN: NaN rows must be written
      v.run(x.data(), y.data(), 3, cols);
      for (int64_t i = 0; i < cols; ++i) {
        if (c.expect.empty()) {
          ASSERT_TRUE(std::isnan(y[cols + i])) << "element " << i << " = " << y[cols + i];
        } else {
          ASSERT_EQ(y[cols + i], c.expect[i]) << "element " << i;  // exact
        }
        const double rtol = 1e-6 + rtol_for(v, cols);  // neighbours: entries in [0, 6]
        ASSERT_NEAR(y[i], ref[i], rtol * ref[i] + 1e-37) << "row 0 element " << i;
        ASSERT_NEAR(y[2 * cols + i], ref[2 * cols + i], rtol * ref[2 * cols + i] + 1e-37)
            << "row 2 element " << i;
      }
    }
  }
}

TEST(SoftmaxCpu, InPlaceZeroRowsAndBadColumns) {
  ThreadPool pool2(2);
  const int64_t rows = 300, cols = 601;
  std::vector<float> x = random_input(rows, cols, 7);
  std::vector<float> ref(x.size());
  softmax_reference(x.data(), ref.data(), rows, cols);
  std::vector<float> y = x;
  softmax_simd(y.data(), y.data(), rows, cols, pool2);  // y aliases x
  check_close("simd in place", x.data(), y.data(), ref.data(), rows, cols, 1e-5);
  y = x;
  softmax_fused(y.data(), y.data(), rows, cols);
  check_close("fused in place", x.data(), y.data(), ref.data(), rows, cols, 1e-5);

  float sentinel = 3.0f;
  softmax_simd(nullptr, nullptr, 0, 5, pool2);  // rows == 0: nothing read or written
  softmax_naive(&sentinel, &sentinel, 0, 1);
  softmax_fused(&sentinel, &sentinel, 0, 1);
  softmax_reference(&sentinel, &sentinel, 0, 1);
  EXPECT_EQ(sentinel, 3.0f);
  EXPECT_ERROR(softmax_simd(x.data(), y.data(), 1, 0, pool2), "softmax: cols must be >= 1, got 0");
  EXPECT_ERROR(softmax_naive(x.data(), y.data(), 1, 0), "softmax: cols must be >= 1, got 0");
  EXPECT_ERROR(softmax_fused(x.data(), y.data(), -1, 3), "softmax: rows must be >= 0, got -1");
}

namespace {

// |y - exp(x)| in ulps of the exact result (the float spacing at |exp(x)|).
double ulp_error(float y, double exact) {
  int e;
  std::frexp(exact, &e);  // exact = f * 2^e, f in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::abs(static_cast<double>(y) - exact) / ulp;
}

// Max ulp error of exp_poly over the floats in [kExpPolyLo, 0] taking every `stride`-th bit
// pattern (x < 0: larger bit patterns are more negative).
double sweep_ulp(Isa isa, uint32_t stride, float* worst_x) {
  const uint32_t first = std::bit_cast<uint32_t>(-0.0f);
  const uint32_t last = std::bit_cast<uint32_t>(-87.33654f);
  std::vector<float> x, y;
  x.reserve(1 << 16);
  double worst = 0.0;
  for (uint64_t b = first; b <= last;) {
    x.clear();
    for (; b <= last && x.size() < (1u << 16); b += stride) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    y.resize(x.size());
    exp_poly(isa, x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = ulp_error(y[i], std::exp(static_cast<double>(x[i])));
      if (u > worst) {
        worst = u;
        *worst_x = x[i];
      }
    }
  }
  return worst;
}

}  // namespace

TEST(SoftmaxExpPoly, MaxUlpErrorOnASampleOfTheDomain) {
  const Isa isa = active_isa();
  float wx = 0;
  const double worst = sweep_ulp(isa, 997, &wx);  // ~1.1M points spread over the range
  std::printf("  exp_poly %-7s max %.3f ulp (at x = %.9g), every 997th float in [-87.34, 0]\n",
              isa_name(isa), worst, wx);
  EXPECT_LE(worst, kExpPolyMaxUlp) << isa_name(isa) << " at x = " << wx;
}

// The measurement behind kExpPolyMaxUlp: every float in [-87.34, 0] (about 1.1e9 of them,
// ~30 s). Run with --gtest_also_run_disabled_tests --gtest_filter='*FullSweep*'.
// MINIGPT_ISA picks the ISA measured.
TEST(SoftmaxExpPoly, DISABLED_FullSweep) {
  const Isa isa = active_isa();
  float wx = 0;
  const double worst = sweep_ulp(isa, 1, &wx);
  std::printf("  exp_poly %-7s max %.4f ulp (at x = %.9g), every float in [-87.34, 0]\n",
              isa_name(isa), worst, wx);
  EXPECT_LE(worst, kExpPolyMaxUlp);
}

TEST(SoftmaxExpPoly, SpecialValues) {
  {
    const Isa isa = active_isa();
    SCOPED_TRACE(isa_name(isa));
    const std::vector<float> x = {0.0f, -0.0f, -kInf, kNaN, -87.4f, -1000.0f, -1e30f, -1.0f};
    std::vector<float> y(x.size(), 5.0f);
    exp_poly(isa, x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_TRUE(std::isnan(y[3]));
    EXPECT_EQ(y[4], 0.0f);
    EXPECT_EQ(y[5], 0.0f);
    EXPECT_EQ(y[6], 0.0f);
    EXPECT_LE(ulp_error(y[7], std::exp(-1.0)), kExpPolyMaxUlp);
  }
}
