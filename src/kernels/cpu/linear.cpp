// Linear layer on the CPU (linear.h): forward and backward, split over our ThreadPool in
// fixed chunks so a result depends only on the thread count, never on timing.
//
// Three paths, chosen by active_isa() (core/isa.h; MINIGPT_ISA forces one):
//
// avx512, the production path on this machine: gemm_avx512.h, the hand-written kernel.
// Measured against OpenBLAS sgemm in one process (/tmp harness, 1 thread, median of 200):
// the Debian OpenBLAS runs its generic "Prescott" kernels on this CPU and is 3-4x slower at
// N = 1, 32 and 1024; even forced to its SkylakeX kernels (OPENBLAS_CORETYPE, which must be set
// before the library loads) it is 1.3-1.5x slower at N = 32 and on par at N = 1024.
//   N < kGemvMaxRows (decode): one dot product per output feature, no packing.
//   otherwise: W^T (forward), W (dx) and x (dW) packed panel-major, then the 12 x 32 kernel.
//
// avx2, the fallback without AVX-512: OpenBLAS sgemm, kept single-threaded (openblas_set_num_threads(1),
// once: its own pool would split the work by load and fight ours for the cores), cut into fixed
// blocks (kRowBlock rows for the forward and dx, kFeatureBlock output features for dW), the same
// blocks for any thread count, because OpenBLAS picks kernels by matrix size.
//
// scalar: plain C++ loops, no BLAS, summed in float in the order of the reduction index (the
// arithmetic the other two paths vectorise), rows (or output features for dW) split over the pool.
//
// Every element's sum over the reduction dimension runs in one kernel call in a
// fixed order, so the thread count changes which thread computes it, never how: 1 and 2 threads
// agree bitwise.
#include "kernels/cpu/linear.h"

#include "core/error.h"
#include "core/isa.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <cblas.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

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

// fn(r0, rows) over fixed blocks of kRowBlock rows of [0, N), split over the pool: the OpenBLAS
// paths' unit. OpenBLAS picks its kernels by the matrix sizes, so a row's rounding may depend on
// how many rows share its call; with fixed blocks every row sees the same call for 1 or 2
// threads, and results match bitwise. macs_per_row sizes the parallel grain.
template <class Fn>
void for_row_blocks(int64_t N, int64_t macs_per_row, ThreadPool& pool, const Fn& fn) {
  pool.parallel_for(
      (N + kRowBlock - 1) / kRowBlock,
      [&](int64_t blk0, int64_t blk1) {
        for (int64_t blk = blk0; blk < blk1; ++blk) {
          const int64_t r0 = blk * kRowBlock;
          fn(r0, std::min(N, r0 + kRowBlock) - r0);
        }
      },
      grain_for(kRowBlock * macs_per_row));
}

void check_sizes(int64_t N, int64_t in, int64_t out) {
  MINIGPT_CHECK(N >= 0 && in >= 1 && out >= 1, "linear: bad sizes N={} in={} out={}", N, in, out);
  MINIGPT_CHECK(N <= INT32_MAX && in <= INT32_MAX && out <= INT32_MAX,
                "linear: sizes exceed the BLAS int range: N={} in={} out={}", N, in, out);
}

// C (M, Nc) = epilogue(A B) on gemm_avx512, B packed in panels (pack_panels*), cut into tasks
// of one micro-tile row block (kGemmTileRows rows) x one 32-column panel, in row-major order,
// split over the pool in equal contiguous chunks: a thread keeps its rows of A in L1 while it
// walks the panels, and the threads' shares differ by at most one task. Each element is summed
// over k in one FMA chain whatever the split, so 1 and 2 threads agree bitwise.
int64_t panel_floats(int64_t K, int64_t N) { return (N + kGemmPanel - 1) / kGemmPanel * kGemmPanel * K; }
void gemm_parallel(int64_t M, int64_t Nc, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                   const float* B, float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool& pool) {
  const int64_t row_tasks = (M + kGemmTileRows - 1) / kGemmTileRows;
  const int64_t col_tasks = (Nc + kGemmPanel - 1) / kGemmPanel;
  pool.parallel_for(
      row_tasks * col_tasks,
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t i = (t / col_tasks) * kGemmTileRows, j = (t % col_tasks) * kGemmPanel;
          gemm_avx512(std::min(kGemmTileRows, M - i), std::min(kGemmPanel, Nc - j), K,
                      A + i * a_rs, a_rs, a_cs, B + (j / kGemmPanel) * K * kGemmPanel, kGemmPanel,
                      C + i * ldc + j, ldc, ep, i, j);
        }
      },
      grain_for(kGemmTileRows * kGemmPanel * K));
}

}  // namespace

namespace {

GemmEpilogue gemm_epilogue(const float* b, int64_t out, const LinearEpilogue& ep) {
  return {.accumulate = false, .bias = b, .residual = ep.residual, .ldr = out, .gelu = ep.gelu,
          .gelu_grad = ep.gelu_grad, .ldg = out};
}

// The GELU part of the epilogue as a pass over y (the paths that cannot fuse it).
void gelu_after(float* y, int64_t n, const LinearEpilogue& ep, ThreadPool& pool) {
  if (!ep.gelu) return;
  if (ep.gelu_grad)
    gelu_forward_with_grad(y, y, ep.gelu_grad, n, pool);
  else
    gelu_forward(y, y, n, pool);
}

// Decode (N < kGemvMaxRows): dot products against W's rows, no transpose; bias and residual
// added per element as the fused store does ((s + b) + residual), then the GELU.
void forward_gemv(const float* x, const float* W, const float* b, float* y, int64_t N,
                  int64_t in, int64_t out, ThreadPool& pool, const LinearEpilogue& ep) {
  pool.parallel_for(
      out,
      [&](int64_t o0, int64_t o1) {
        for (int64_t r = 0; r < N; ++r)
          gemv_rows_avx512(o1 - o0, in, x + r * in, W + o0 * in, in, y + r * out + o0,
                           b ? b + o0 : nullptr, ep.residual ? ep.residual + r * out + o0 : nullptr);
      },
      grain_for(N * in));
  gelu_after(y, N * out, ep, pool);
}

// The avx2 path: OpenBLAS, then the epilogue as separate passes (the product goes to a scratch
// buffer when a residual is added, since the residual may be y itself). w is W (out, in), or
// with w_transposed W^T (in, out), the packed forward's layout (linear_pack_weights).
void forward_blas(const float* x, const float* w, bool w_transposed, const float* b, float* y,
                  int64_t N, int64_t in, int64_t out, ThreadPool& pool, const LinearEpilogue& ep) {
  blas_single_threaded();
  std::vector<float> scratch(ep.residual ? static_cast<size_t>(N * out) : 0);
  float* prod = ep.residual ? scratch.data() : y;
  for_row_blocks(N, in * out, pool, [&](int64_t r0, int64_t rows) {
    float* yr = prod + r0 * out;
    float beta = 0.0f;
    if (b) {  // y = b, then y = x W^T + y in the sgemm (product first, then + b)
      for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, yr + r * out);
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, w_transposed ? CblasNoTrans : CblasTrans,
                static_cast<int>(rows), static_cast<int>(out), static_cast<int>(in), 1.0f,
                x + r0 * in, static_cast<int>(in), w, static_cast<int>(w_transposed ? out : in),
                beta, yr, static_cast<int>(out));
  });
  if (ep.residual)
    for (int64_t i = 0; i < N * out; ++i) y[i] = prod[i] + ep.residual[i];
  gelu_after(y, N * out, ep, pool);
}

// The scalar path: y[n, o] = ((sum_i x[n, i] W[o, i]) + b[o]) + residual[n, o], the sum in
// float over i in order, then the GELU as a pass over y. With Wt (in, out) = W^T (the packed
// forward) the same sums run as row updates acc += x[n, i] * Wt[i, :] (another loop nest over
// another layout, the same operations per element: the same bits). Rows split over the pool.
void forward_scalar(const float* x, const float* W, const float* Wt, const float* b, float* y,
                    int64_t N, int64_t in, int64_t out, ThreadPool& pool, const LinearEpilogue& ep) {
  pool.parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        std::vector<float> acc(static_cast<size_t>(out));
        for (int64_t n = r0; n < r1; ++n) {
          const float* xr = x + n * in;
          if (Wt) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t i = 0; i < in; ++i)
              for (int64_t o = 0; o < out; ++o) acc[static_cast<size_t>(o)] += xr[i] * Wt[i * out + o];
          } else {
            for (int64_t o = 0; o < out; ++o) {
              float s = 0.0f;
              for (int64_t i = 0; i < in; ++i) s += xr[i] * W[o * in + i];
              acc[static_cast<size_t>(o)] = s;
            }
          }
          for (int64_t o = 0; o < out; ++o) {  // residual may be y: read before the store
            float s = acc[static_cast<size_t>(o)];
            if (b) s += b[o];
            if (ep.residual) s += ep.residual[n * out + o];
            y[n * out + o] = s;
          }
        }
      },
      grain_for(in * out));
  gelu_after(y, N * out, ep, pool);
}

// The scalar backward: dx (N, in) = (dy @ W) [* dx_scale], rows split; dW (out, in) += dy^T @ x,
// output features split. Each element summed in float over the reduction index in order
// (o for dx, n for dW), then stored (dx) or added to what dW holds.
void backward_scalar(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     int64_t N, int64_t in, int64_t out, ThreadPool& pool, const float* dx_scale) {
  if (dx)
    pool.parallel_for(
        N,
        [&](int64_t r0, int64_t r1) {
          for (int64_t n = r0; n < r1; ++n) {
            float* dxr = dx + n * in;
            std::fill(dxr, dxr + in, 0.0f);
            for (int64_t o = 0; o < out; ++o)
              for (int64_t i = 0; i < in; ++i) dxr[i] += dy[n * out + o] * W[o * in + i];
            if (dx_scale)
              for (int64_t i = 0; i < in; ++i) dxr[i] *= dx_scale[n * in + i];
          }
        },
        grain_for(in * out));
  pool.parallel_for(
      out,
      [&](int64_t o0, int64_t o1) {
        std::vector<float> acc(static_cast<size_t>(in));
        for (int64_t o = o0; o < o1; ++o) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < in; ++i) acc[static_cast<size_t>(i)] += dy[n * out + o] * x[n * in + i];
          for (int64_t i = 0; i < in; ++i) dW[o * in + i] += acc[static_cast<size_t>(i)];
        }
      },
      grain_for(N * in));
}

// The panel packings of gemm_avx512.h split over the pool by whole panels (each panel is
// written by one thread; the layout does not depend on the split). Chunks of >= 2^15 floats.
// B (K, N) row-major -> panels:
void pack_panels_parallel(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst,
                          ThreadPool& pool) {
  pool.parallel_for(
      (N + kGemmPanel - 1) / kGemmPanel,
      [&](int64_t p0, int64_t p1) {
        const int64_t j0 = p0 * kGemmPanel, j1 = std::min(N, p1 * kGemmPanel);
        pack_panels_avx512(K, j1 - j0, B + j0, ldb, dst + p0 * K * kGemmPanel);
      },
      std::max<int64_t>(1, (int64_t{1} << 15) / (K * kGemmPanel)));
}
// B = W^T for W (out, in) -> panels (a panel is 32 rows of W):
void pack_transposed_parallel(int64_t out, int64_t in, const float* W, float* dst,
                              ThreadPool& pool) {
  pool.parallel_for(
      (out + kGemmPanel - 1) / kGemmPanel,
      [&](int64_t p0, int64_t p1) {
        const int64_t r0 = p0 * kGemmPanel, r1 = std::min(out, p1 * kGemmPanel);
        pack_panels_transposed_avx512(r1 - r0, in, W + r0 * in, in, dst + p0 * in * kGemmPanel);
      },
      std::max<int64_t>(1, (int64_t{1} << 15) / (in * kGemmPanel)));
}

}  // namespace

void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t N,
                    int64_t in, int64_t out, ThreadPool& pool, const LinearEpilogue& ep) {
  check_sizes(N, in, out);
  if (N == 0) return;
  if (active_isa() == Isa::Scalar) return forward_scalar(x, W, nullptr, b, y, N, in, out, pool, ep);
  if (active_isa() == Isa::Avx2) return forward_blas(x, W, false, b, y, N, in, out, pool, ep);
  if (N < kGemvMaxRows) return forward_gemv(x, W, b, y, N, in, out, pool, ep);
  // W^T (in, out) in panels, so the kernel reads B along contiguous output features.
  std::unique_ptr<float[]> Wt(new float[static_cast<size_t>(panel_floats(in, out))]);
  pack_transposed_parallel(out, in, W, Wt.get(), pool);
  gemm_parallel(N, out, in, x, in, 1, Wt.get(), y, out, gemm_epilogue(b, out, ep), pool);
}

int64_t linear_packed_floats(int64_t in, int64_t out) {
  check_sizes(0, in, out);
  return active_isa() == Isa::Avx512 ? panel_floats(in, out) : in * out;
}

void linear_pack_weights(const float* W, float* packed, int64_t in, int64_t out) {
  check_sizes(0, in, out);
  if (active_isa() == Isa::Avx512) {
    pack_panels_transposed_avx512(out, in, W, in, packed);  // as linear_forward does per call
    return;
  }
  // avx2 and scalar: W^T (in, out), row-major, read by sgemm without its transpose (avx2) or by
  // the scalar row updates.
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) packed[i * out + o] = W[o * in + i];
}

void linear_forward_packed(const float* x, const float* W, const float* packed, const float* b,
                           float* y, int64_t N, int64_t in, int64_t out, ThreadPool& pool,
                           const LinearEpilogue& ep) {
  check_sizes(N, in, out);
  if (N == 0) return;
  // Decode (N < kGemvMaxRows) reads W's rows, as linear_forward: on avx512 the dot products;
  // on avx2 sgemm with W transposed, since OpenBLAS sends M = 1 to its gemv kernels, and the
  // one for W^T sums in another order than the one for W (1-ulp differences).
  if (linear_packed_reads_weights(N)) return linear_forward(x, W, b, y, N, in, out, pool, ep);
  if (active_isa() == Isa::Scalar) return forward_scalar(x, W, packed, b, y, N, in, out, pool, ep);
  if (active_isa() == Isa::Avx2) return forward_blas(x, packed, true, b, y, N, in, out, pool, ep);
  gemm_parallel(N, out, in, x, in, 1, packed, y, out, gemm_epilogue(b, out, ep), pool);
}

bool linear_packed_reads_weights(int64_t N) { return active_isa() != Isa::Scalar && N < kGemvMaxRows; }

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t N, int64_t in, int64_t out, ThreadPool& pool,
                     const float* dx_scale) {
  check_sizes(N, in, out);
  if (N == 0) return;  // dx is empty; dW, db get nothing added
  if (active_isa() == Isa::Scalar) {
    backward_scalar(x, W, dy, dx, dW, N, in, out, pool, dx_scale);
    if (db) column_sums(dy, db, N, out, pool);
    return;
  }
  if (active_isa() == Isa::Avx512) {
    // dx (N, in) = dy (N, out) @ W (out, in)
    std::unique_ptr<float[]> Bp(new float[static_cast<size_t>(std::max(panel_floats(out, in), panel_floats(N, in)))]);
    if (dx) {
      pack_panels_parallel(out, in, W, in, Bp.get(), pool);
      gemm_parallel(N, in, out, dy, out, 1, Bp.get(), dx, in, {.scale = dx_scale, .lds = in}, pool);
    }
    // dW (out, in) += dy^T (out, N) @ x (N, in): A(o, n) = dy[n * out + o]
    pack_panels_parallel(N, in, x, in, Bp.get(), pool);
    gemm_parallel(out, in, N, dy, 1, out, Bp.get(), dW, in, {.accumulate = true}, pool);
    if (db) column_sums(dy, db, N, out, pool);
    return;
  }
  // avx2: OpenBLAS.
  blas_single_threaded();
  const int I = static_cast<int>(in), O = static_cast<int>(out), Nn = static_cast<int>(N);
  // dx (N, in) = dy (N, out) @ W (out, in), [* dx_scale]: fixed blocks of rows (as the forward).
  if (dx) {
    for_row_blocks(N, in * out, pool, [&](int64_t r0, int64_t rows) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), I, O, 1.0f,
                  dy + r0 * out, O, W, I, 0.0f, dx + r0 * in, I);
      if (dx_scale)
        for (int64_t i = r0 * in; i < (r0 + rows) * in; ++i) dx[i] *= dx_scale[i];
    });
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
// db[o0, o0 + 16 * blocks) += column sums of dy, each column summed over the rows in order in
// double (two 8-lane accumulators per 16 columns, so no sum is reordered).
__attribute__((target("avx512f"))) void column_sums_avx512(const float* dy, int64_t N, int64_t out,
                                                          int64_t o0, int64_t o1, float* db) {
  for (int64_t o = o0; o < o1; o += 16) {
    const __mmask16 m = avx512::lanes(o1 - o);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t n = 0; n < N; ++n) {
      const __m512 v = _mm512_maskz_loadu_ps(m, dy + n * out + o);
      lo = _mm512_add_pd(lo, avx512::widen_lo(v));
      hi = _mm512_add_pd(hi, avx512::widen_hi(v));
    }
    const __m512 sums = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))), _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
    _mm512_mask_storeu_ps(db + o, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, db + o), sums));
  }
}

void column_sums(const float* dy, float* db, int64_t N, int64_t out, ThreadPool& pool) {
  // Fixed blocks of 16 columns; chunks of at least 2^16 elements (~20 us) per thread.
  const int64_t blocks = (out + 15) / 16;
  const bool avx512 = active_isa() == Isa::Avx512;
  pool.parallel_for(
      blocks,
      [&](int64_t blk0, int64_t blk1) {
        const int64_t o0 = blk0 * 16, o1 = std::min(out, blk1 * 16);
        if (avx512) return column_sums_avx512(dy, N, out, o0, o1, db);
        for (int64_t o = o0; o < o1; ++o) {
          double acc = 0.0;
          for (int64_t n = 0; n < N; ++n) acc += dy[n * out + o];
          db[o] += static_cast<float>(acc);
        }
      },
      std::max<int64_t>(1, (int64_t{1} << 16) / (16 * std::max<int64_t>(N, 1))));
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
