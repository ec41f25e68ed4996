// AVX-512 GEMM micro-kernels (gemm_avx512.h). Compiled with per-function target attributes,
// so the library still builds and runs without -mavx512f; callers run them only when
// active_isa() is Isa::Avx512 (core/isa.h).
#include "kernels/cpu/gemm_avx512.h"

#include "core/isa.h"
#include "kernels/cpu/vec_math_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

namespace minigpt::cpu {
namespace {

constexpr int kMR = kGemmTileRows;  // rows of C per micro-tile: 12 x 2 zmm accumulators = 24 registers
constexpr int kNR = kGemmPanel;     // columns of C per micro-tile (2 zmm)

// C tile (MR rows, up to 32 columns under masks m0, m1) = epilogue(sum_k A(m, k) B(k, :)).
// The accumulators are named variables, not an array: GCC keeps an array of __m512 in memory
// and stores all 24 of them on every k step. The tile is at (ei, ej) of ep's arrays. (ep is
// read field by field: a per-tile copy of the struct, read back with 16-byte loads right after
// its 8-byte stores, stalled store forwarding for ~8% of a training step.)
#define MINIGPT_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
template <int MR>
__attribute__((target("avx512f"))) void micro_tile(int64_t K, const float* A, int64_t a_rs,
                                                   int64_t a_cs, const float* B, int64_t ldb,
                                                   float* C, int64_t ldc, __mmask16 m0,
                                                   __mmask16 m1, const GemmEpilogue& ep,
                                                   int64_t ei, int64_t ej) {
  static_assert(MR >= 1 && MR <= kMR);
#define DECLARE(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();
  MINIGPT_FOR_ROWS(DECLARE)
#undef DECLARE
  for (int64_t k = 0; k < K; ++k) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + k * ldb);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, B + k * ldb + 16);
    const float* a = A + k * a_cs;
#define STEP(r)                                          \
  if constexpr (MR > r) {                                \
    const __m512 av = _mm512_set1_ps(a[r * a_rs]);       \
    c##r##_0 = _mm512_fmadd_ps(av, b0, c##r##_0);        \
    c##r##_1 = _mm512_fmadd_ps(av, b1, c##r##_1);        \
  }
    MINIGPT_FOR_ROWS(STEP)
#undef STEP
  }
  // The sum over k is finished first, then the epilogue's terms in gemm_avx512.h's order.
  const float* bias = ep.bias ? ep.bias + ej : nullptr;
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#define STORE(r)                                                                 \
  if constexpr (MR > r) {                                                        \
    float* c = C + r * ldc;                                                      \
    if (ep.accumulate) {                                                         \
      c##r##_0 = _mm512_add_ps(c##r##_0, _mm512_maskz_loadu_ps(m0, c));          \
      c##r##_1 = _mm512_add_ps(c##r##_1, _mm512_maskz_loadu_ps(m1, c + 16));     \
    }                                                                            \
    if (ep.bias) {                                                               \
      c##r##_0 = _mm512_add_ps(c##r##_0, bias0);                                 \
      c##r##_1 = _mm512_add_ps(c##r##_1, bias1);                                 \
    }                                                                            \
    if (ep.residual) {                                                           \
      const float* res = ep.residual + (ei + r) * ep.ldr + ej;                   \
      c##r##_0 = _mm512_add_ps(c##r##_0, _mm512_maskz_loadu_ps(m0, res));        \
      c##r##_1 = _mm512_add_ps(c##r##_1, _mm512_maskz_loadu_ps(m1, res + 16));   \
    }                                                                            \
    if (ep.scale) {                                                              \
      const float* sc = ep.scale + (ei + r) * ep.lds + ej;                       \
      c##r##_0 = _mm512_mul_ps(c##r##_0, _mm512_maskz_loadu_ps(m0, sc));         \
      c##r##_1 = _mm512_mul_ps(c##r##_1, _mm512_maskz_loadu_ps(m1, sc + 16));    \
    }                                                                            \
    if (ep.gelu) {                                                               \
      __m512 d0, d1;                                                             \
      c##r##_0 = avx512::gelu_with_grad_ps(c##r##_0, &d0);                       \
      c##r##_1 = avx512::gelu_with_grad_ps(c##r##_1, &d1);                       \
      if (ep.gelu_grad) {                                                        \
        float* gg = ep.gelu_grad + (ei + r) * ep.ldg + ej;                       \
        _mm512_mask_storeu_ps(gg, m0, d0);                                       \
        _mm512_mask_storeu_ps(gg + 16, m1, d1);                                  \
      }                                                                          \
    }                                                                            \
    _mm512_mask_storeu_ps(c, m0, c##r##_0);                                      \
    _mm512_mask_storeu_ps(c + 16, m1, c##r##_1);                                 \
  }
  MINIGPT_FOR_ROWS(STORE)
#undef STORE
}
#undef MINIGPT_FOR_ROWS

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*,
                        int64_t, __mmask16, __mmask16, const GemmEpilogue&, int64_t, int64_t);

template <int... R>
constexpr auto make_tiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&micro_tile<R + 1>...};
}

using avx512::lanes;

}  // namespace


void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                 const float* B, int64_t ldb, float* C, int64_t ldc, const GemmEpilogue& ep,
                 int64_t ep_i0, int64_t ep_j0) {
  static constexpr auto tiles = make_tiles(std::make_integer_sequence<int, kMR>{});
  for (int64_t j = 0; j < N; j += kNR) {  // a K x 32 panel of B, reused by every row tile
    const __mmask16 m0 = lanes(N - j), m1 = lanes(N - j - 16);
    for (int64_t i = 0; i < M; i += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i));
      tiles[static_cast<size_t>(mr - 1)](K, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j,
                                         ldc, m0, m1, ep, ep_i0 + i, ep_j0 + j);
    }
  }
}

namespace {

// One 16 x 16 block: dst (cols, rows) = src (rows, cols)^T, rows, cols <= 16, via the usual
// unpack / shuffle / 128-bit-lane shuffle network (no gathers, no scalar moves).
__attribute__((target("avx512f"))) void transpose16(const float* src, int64_t lds, float* dst,
                                                    int64_t ldd, int rows, int cols) {
  const __mmask16 col_mask = lanes(cols), row_mask = lanes(rows);
  __m512 r[16], t[16], u[16];
  for (int j = 0; j < 16; ++j)
    r[j] = j < rows ? _mm512_maskz_loadu_ps(col_mask, src + j * lds) : _mm512_setzero_ps();
  for (int j = 0; j < 16; j += 2) {
    t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);      // per lane: r0_0 r1_0 r0_1 r1_1
    t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);  //           r0_2 r1_2 r0_3 r1_3
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + c]: column (4 lane + c) of rows g..g+3
    u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);   // lanes 0, 2
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);   // lanes 1, 3
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    const __m512 out[4] = {_mm512_shuffle_f32x4(v0, w0, 0x88), _mm512_shuffle_f32x4(v1, w1, 0x88),
                           _mm512_shuffle_f32x4(v0, w0, 0xDD), _mm512_shuffle_f32x4(v1, w1, 0xDD)};
    for (int l = 0; l < 4; ++l) {  // column 4 l + c of src
      const int col = 4 * l + c;
      if (col < cols) _mm512_mask_storeu_ps(dst + col * ldd, row_mask, out[l]);
    }
  }
}

}  // namespace

void transpose_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst,
                      int64_t ldd) {
  for (int64_t i = 0; i < rows; i += 16)
    for (int64_t j = 0; j < cols; j += 16)
      transpose16(src + i * lds + j, lds, dst + j * ldd + i, ldd,
                  static_cast<int>(std::min<int64_t>(16, rows - i)),
                  static_cast<int>(std::min<int64_t>(16, cols - j)));
}

void pack_panels_transposed_avx512(int64_t rows, int64_t cols, const float* src, int64_t lds,
                                   float* dst) {
  // src (rows, cols) -> B = src^T (cols, rows) in panels of 32 of B's columns (= src rows).
  for (int64_t i = 0; i < rows; i += 16)
    for (int64_t j = 0; j < cols; j += 16)
      transpose16(src + i * lds + j, lds, dst + (i / kNR) * cols * kNR + j * kNR + i % kNR, kNR,
                  static_cast<int>(std::min<int64_t>(16, rows - i)),
                  static_cast<int>(std::min<int64_t>(16, cols - j)));
}

__attribute__((target("avx512f"))) void pack_panels_avx512(int64_t K, int64_t N, const float* B,
                                                           int64_t ldb, float* dst) {
  for (int64_t j = 0; j < N; j += kNR) {  // two masked 16-float moves per row of a panel
    const __mmask16 m0 = lanes(N - j), m1 = lanes(N - j - 16);
    float* panel = dst + (j / kNR) * K * kNR;
    for (int64_t k = 0; k < K; ++k) {
      const float* src = B + k * ldb + j;
      _mm512_mask_storeu_ps(panel + k * kNR, m0, _mm512_maskz_loadu_ps(m0, src));
      _mm512_mask_storeu_ps(panel + k * kNR + 16, m1, _mm512_maskz_loadu_ps(m1, src + 16));
    }
  }
}

__attribute__((target("avx512f"))) void gemv_rows_avx512(int64_t N, int64_t K, const float* x,
                                                         const float* W, int64_t ldw, float* y,
                                                         const float* bias,
                                                         const float* residual) {
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + n * ldw;
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(w + k), acc);
    const __mmask16 m = lanes(K - k);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, w + k), acc);
    float s = _mm512_reduce_add_ps(acc);
    if (bias) s += bias[n];
    if (residual) s += residual[n];
    y[n] = s;
  }
}

}  // namespace minigpt::cpu
