// Linear layer on the CPU (linear.h): forward and backward through OpenBLAS sgemm, split over
// our ThreadPool in fixed chunks so a result depends only on the thread count, never on timing.
//
// OpenBLAS itself is kept single-threaded (openblas_set_num_threads(1), once): its own pool
// would split the work by load and fight ours for the 2 cores. The work is cut into fixed
// blocks (kRowBlock rows for the forward and dx, kFeatureBlock output features for dW and db),
// the same blocks for any thread count, each one sgemm call; every element's sum over the
// reduction dimension runs inside one call. So the thread count changes which thread computes a
// block, never how it is summed: 1 and 2 threads agree bitwise.
#include "kernels/cpu/linear.h"

#include "core/error.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>

namespace minigpt::cpu {
namespace {

// Work below this many multiply-adds stays on the calling thread: waking a worker costs a few
// microseconds, about what 2^17 FMAs take on one core.
constexpr int64_t kMinParallelMacs = int64_t{1} << 17;
constexpr int64_t kRowBlock = 64;      // rows of x per sgemm call (forward, dx)
constexpr int64_t kFeatureBlock = 32;  // output features per sgemm call (dW, db)

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Items per chunk so that a chunk holds at least kMinParallelMacs of work.
int64_t grain_for(int64_t macs_per_item) {
  return std::max<int64_t>(1, kMinParallelMacs / std::max<int64_t>(1, macs_per_item));
}

void check_sizes(int64_t N, int64_t in, int64_t out) {
  MINIGPT_CHECK(N >= 0 && in >= 1 && out >= 1, "linear: bad sizes N={} in={} out={}", N, in, out);
  MINIGPT_CHECK(N <= INT32_MAX && in <= INT32_MAX && out <= INT32_MAX,
                "linear: sizes exceed the BLAS int range: N={} in={} out={}", N, in, out);
}

}  // namespace

void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t N,
                    int64_t in, int64_t out, ThreadPool& pool) {
  check_sizes(N, in, out);
  if (N == 0) return;
  blas_single_threaded();
  // Fixed blocks of kRowBlock rows, whatever the thread count: OpenBLAS picks its kernels by
  // the matrix sizes, so a row's rounding may depend on how many rows share its call. With
  // fixed blocks every row sees the same call for 1 or 2 threads, and results match bitwise.
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(
      blocks,
      [&](int64_t blk0, int64_t blk1) {
        for (int64_t blk = blk0; blk < blk1; ++blk) {
          const int64_t r0 = blk * kRowBlock, rows = std::min(N, r0 + kRowBlock) - r0;
          float* yr = y + r0 * out;
          float beta = 0.0f;
          if (b) {  // y = b, then y = x W^T + y in the sgemm (product first, then + b)
            for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, yr + r * out);
            beta = 1.0f;
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                      static_cast<int>(out), static_cast<int>(in), 1.0f, x + r0 * in,
                      static_cast<int>(in), W, static_cast<int>(in), beta, yr,
                      static_cast<int>(out));
        }
      },
      grain_for(kRowBlock * in * out));
}

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t N, int64_t in, int64_t out, ThreadPool& pool) {
  check_sizes(N, in, out);
  if (N == 0) return;  // dx is empty; dW, db get nothing added
  blas_single_threaded();
  const int I = static_cast<int>(in), O = static_cast<int>(out), Nn = static_cast<int>(N);
  // dx (N, in) = dy (N, out) @ W (out, in): fixed blocks of rows (as in the forward).
  if (dx) {
    const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
    pool.parallel_for(
        blocks,
        [&](int64_t blk0, int64_t blk1) {
          for (int64_t blk = blk0; blk < blk1; ++blk) {
            const int64_t r0 = blk * kRowBlock, rows = std::min(N, r0 + kRowBlock) - r0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), I, O,
                        1.0f, dy + r0 * out, O, W, I, 0.0f, dx + r0 * in, I);
          }
        },
        grain_for(kRowBlock * in * out));
  }
  // dW (out, in) += dy^T (out, N) @ x (N, in) and db (out) += sum over N of dy: fixed blocks of
  // output features, each summing over all N rows in one call.
  const int64_t blocks = (out + kFeatureBlock - 1) / kFeatureBlock;
  pool.parallel_for(
      blocks,
      [&](int64_t blk0, int64_t blk1) {
        for (int64_t blk = blk0; blk < blk1; ++blk) {
          const int64_t o0 = blk * kFeatureBlock, o1 = std::min(out, o0 + kFeatureBlock);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(o1 - o0), I, Nn,
                      1.0f, dy + o0, O, x, I, 1.0f, dW + o0 * in, I);
          if (db) {
            double acc[kFeatureBlock] = {};
            for (int64_t n = 0; n < N; ++n) {
              const float* row = dy + n * out + o0;
              for (int64_t o = 0; o < o1 - o0; ++o) acc[o] += row[o];
            }
            for (int64_t o = o0; o < o1; ++o) db[o] += static_cast<float>(acc[o - o0]);
          }
        }
      },
      grain_for(kFeatureBlock * N * in));
}

void linear_reference(const float* x, const float* W, const float* b, float* y, int64_t N,
                      int64_t in, int64_t out) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? static_cast<double>(b[o]) : 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += static_cast<double>(x[n * in + i]) * static_cast<double>(W[o * in + i]);
      y[n * out + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace minigpt::cpu
