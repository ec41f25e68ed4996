// Linear layer on the CPU (linear.h): forward and backward, split over our ThreadPool in
// fixed chunks so a result depends only on the thread count, never on timing.
//
// Production path (AVX-512, this machine): gemm_avx512.h, the hand-written kernel, for every N.
// Measured against OpenBLAS sgemm in one process (/tmp harness, 1 thread, median of 200):
// the Debian OpenBLAS runs its generic "Prescott" kernels on this CPU and is 3-4x slower at
// N = 1, 32 and 1024; even forced to its SkylakeX kernels (OPENBLAS_CORETYPE, which must be set
// before the library loads) it is 1.3-1.5x slower at N = 32 and on par at N = 1024.
//   N < kGemvMaxRows (decode): one dot product per output feature, no packing.
//   otherwise: W^T (forward), W (dx) and x (dW) packed panel-major, then the 12 x 32 kernel.
//
// Fallback without AVX-512: OpenBLAS sgemm, kept single-threaded (openblas_set_num_threads(1),
// once: its own pool would split the work by load and fight ours for the cores), cut into fixed
// blocks (kRowBlock rows for the forward and dx, kFeatureBlock output features for dW), the same
// blocks for any thread count, because OpenBLAS picks kernels by matrix size.
//
// Either way every element's sum over the reduction dimension runs in one kernel call in a
// fixed order, so the thread count changes which thread computes it, never how: 1 and 2 threads
// agree bitwise.
#include "kernels/cpu/linear.h"

#include "core/error.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <cblas.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace minigpt::cpu {
namespace {

// db (out) += column sums of dy (N, out), in double, rows in order; columns split in fixed blocks.
void column_sums(const float* dy, float* db, int64_t N, int64_t out, ThreadPool& pool);

// Work below this many multiply-adds stays on the calling thread: waking a worker costs a few
// microseconds (more on a busy machine); 2^20 multiply-adds take ~10 us on one core.
constexpr int64_t kMinParallelMacs = int64_t{1} << 20;
constexpr int64_t kRowBlock = 64;      // rows of x per sgemm call (forward, dx)
constexpr int64_t kFeatureBlock = 32;  // output features per sgemm call (dW, db)
constexpr int64_t kGemvMaxRows = 4;    // below this many rows the forward uses dot products

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

// C (M, Nc) = [C +] A B on gemm_avx512, B packed in panels (pack_panels*), cut into tasks of
// kTaskRows rows x one 32-column panel split over the pool. Each element is summed over k in
// one FMA chain whatever the split, so 1 and 2 threads agree bitwise.
constexpr int64_t kTaskRows = 48;
// Floats of a panel-major copy of a (K, N) matrix.
int64_t panel_floats(int64_t K, int64_t N) { return (N + kGemmPanel - 1) / kGemmPanel * kGemmPanel * K; }
void gemm_parallel(int64_t M, int64_t Nc, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                   const float* B, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  const int64_t row_tasks = (M + kTaskRows - 1) / kTaskRows, col_tasks = (Nc + 31) / 32;
  pool.parallel_for(
      row_tasks * col_tasks,
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t i = (t / col_tasks) * kTaskRows, j = (t % col_tasks) * 32;
          gemm_avx512(std::min(kTaskRows, M - i), std::min<int64_t>(32, Nc - j), K, A + i * a_rs,
                      a_rs, a_cs, B + (j / kGemmPanel) * K * kGemmPanel, kGemmPanel,
                      C + i * ldc + j, ldc, accumulate);
        }
      },
      grain_for(kTaskRows * 32 * K));
}

}  // namespace

void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t N,
                    int64_t in, int64_t out, ThreadPool& pool) {
  check_sizes(N, in, out);
  if (N == 0) return;
  if (gemm_avx512_available()) {
    if (b)  // y = b, then y += x W^T (the product summed first, then + b, as BLAS beta = 1)
      for (int64_t r = 0; r < N; ++r) std::copy(b, b + out, y + r * out);
    if (N < kGemvMaxRows) {  // decode: dot products against W's rows, no transpose
      pool.parallel_for(
          out,
          [&](int64_t o0, int64_t o1) {
            for (int64_t r = 0; r < N; ++r)
              gemv_rows_avx512(o1 - o0, in, x + r * in, W + o0 * in, in, y + r * out + o0, b != nullptr);
          },
          grain_for(N * in));
      return;
    }
    // W^T (in, out) so the kernel reads B along contiguous output features.
    std::unique_ptr<float[]> Wt(new float[static_cast<size_t>(panel_floats(in, out))]);
    pack_panels_transposed_avx512(out, in, W, in, Wt.get());
    gemm_parallel(N, out, in, x, in, 1, Wt.get(), y, out, b != nullptr, pool);
    return;
  }
  // No AVX-512: OpenBLAS.
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

int64_t linear_packed_floats(int64_t in, int64_t out) {
  check_sizes(0, in, out);
  return gemm_avx512_available() ? panel_floats(in, out) : in * out;
}

void linear_pack_weights(const float* W, float* packed, int64_t in, int64_t out) {
  check_sizes(0, in, out);
  if (gemm_avx512_available())
    pack_panels_transposed_avx512(out, in, W, in, packed);  // as linear_forward does per call
  else
    std::copy(W, W + in * out, packed);  // the OpenBLAS fallback reads W itself
}

void linear_forward_packed(const float* x, const float* W, const float* packed, const float* b,
                           float* y, int64_t N, int64_t in, int64_t out, ThreadPool& pool) {
  check_sizes(N, in, out);
  if (N < kGemvMaxRows || !gemm_avx512_available())  // these paths read W, never a packing
    return linear_forward(x, W, b, y, N, in, out, pool);
  if (b)
    for (int64_t r = 0; r < N; ++r) std::copy(b, b + out, y + r * out);
  gemm_parallel(N, out, in, x, in, 1, packed, y, out, b != nullptr, pool);
}

namespace {
// y[0, n) = GELU(y) in place, float (vec_math_avx512.h); the tail through a padded copy.
__attribute__((target("avx512f"))) void gelu_inplace_avx512(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, avx512::gelu_ps(_mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, avx512::gelu_ps(_mm512_maskz_loadu_ps(m, y + i)));
  }
}
}  // namespace

void linear_forward_packed_gelu(const float* x, const float* W, const float* packed,
                                const float* b, float* y, int64_t N, int64_t in, int64_t out,
                                ThreadPool& pool) {
  linear_forward_packed(x, W, packed, b, y, N, in, out, pool);
  if (!gemm_avx512_available()) return gelu_forward(y, y, N * out, pool);
  // 1 << 14 elements per chunk, as gelu_forward: smaller stays on the calling thread
  pool.parallel_for(
      N * out, [&](int64_t i0, int64_t i1) { gelu_inplace_avx512(y + i0, i1 - i0); }, 1 << 14);
}

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t N, int64_t in, int64_t out, ThreadPool& pool) {
  check_sizes(N, in, out);
  if (N == 0) return;  // dx is empty; dW, db get nothing added
  if (gemm_avx512_available()) {
    // dx (N, in) = dy (N, out) @ W (out, in)
    std::unique_ptr<float[]> Bp(new float[static_cast<size_t>(std::max(panel_floats(out, in), panel_floats(N, in)))]);
    if (dx) {
      pack_panels(out, in, W, in, Bp.get());
      gemm_parallel(N, in, out, dy, out, 1, Bp.get(), dx, in, false, pool);
    }
    // dW (out, in) += dy^T (out, N) @ x (N, in): A(o, n) = dy[n * out + o]
    pack_panels(N, in, x, in, Bp.get());
    gemm_parallel(out, in, N, dy, 1, out, Bp.get(), dW, in, true, pool);
    if (db) column_sums(dy, db, N, out, pool);
    return;
  }
  // No AVX-512: OpenBLAS.
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
        }
      },
      grain_for(kFeatureBlock * N * in));
  if (db) column_sums(dy, db, N, out, pool);
}

namespace {
// acc[o] += sum over rows of dy[n, o0 + o], rows in order: independent columns, so the compiler
// vectorises it (AVX-512 when the CPU has it) without reordering any sum.
__attribute__((target("avx512f"))) void column_block_sums_avx512(const float* dy, int64_t N,
                                                                 int64_t out, int64_t o0,
                                                                 int64_t w, double* acc) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = dy + n * out + o0;
    for (int64_t o = 0; o < w; ++o) acc[o] += row[o];
  }
}

void column_sums(const float* dy, float* db, int64_t N, int64_t out, ThreadPool& pool) {
  const int64_t blocks = (out + kFeatureBlock - 1) / kFeatureBlock;
  pool.parallel_for(
      blocks,
      [&](int64_t blk0, int64_t blk1) {
        for (int64_t blk = blk0; blk < blk1; ++blk) {
          const int64_t o0 = blk * kFeatureBlock, o1 = std::min(out, o0 + kFeatureBlock);
          double acc[kFeatureBlock] = {};
          if (gemm_avx512_available()) {
            column_block_sums_avx512(dy, N, out, o0, o1 - o0, acc);
          } else {
            for (int64_t n = 0; n < N; ++n) {
              const float* row = dy + n * out + o0;
              for (int64_t o = 0; o < o1 - o0; ++o) acc[o] += row[o];
            }
          }
          for (int64_t o = o0; o < o1; ++o) db[o] += static_cast<float>(acc[o - o0]);
        }
      },
      grain_for(kFeatureBlock * N));
}
}  // namespace

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
