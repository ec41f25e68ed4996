// AVX-512 GEMM micro-kernels (gemm_avx512.h). Compiled with per-function target attributes,
// so the library still builds and runs without -mavx512f; callers check
// gemm_avx512_available() first.
#include "kernels/cpu/gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

namespace minigpt::cpu {
namespace {

constexpr int kMR = 12;  // rows of C per micro-tile: 12 x 2 zmm accumulators = 24 registers
constexpr int kNR = 32;  // columns of C per micro-tile (2 zmm)

// C tile (MR rows, up to 32 columns under masks m0, m1) = [C +] sum_k A(m, k) B(k, :).
// The accumulators are named variables, not an array: GCC keeps an array of __m512 in memory
// and stores all 24 of them on every k step.
#define MINIGPT_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
template <int MR>
__attribute__((target("avx512f"))) void micro_tile(int64_t K, const float* A, int64_t a_rs,
                                                   int64_t a_cs, const float* B, int64_t ldb,
                                                   float* C, int64_t ldc, __mmask16 m0,
                                                   __mmask16 m1, bool accumulate) {
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
  // C + sum when accumulating: the sum over k is finished first (as BLAS with beta = 1).
#define STORE(r)                                                              \
  if constexpr (MR > r) {                                                     \
    float* c = C + r * ldc;                                                   \
    if (accumulate) {                                                         \
      c##r##_0 = _mm512_add_ps(c##r##_0, _mm512_maskz_loadu_ps(m0, c));       \
      c##r##_1 = _mm512_add_ps(c##r##_1, _mm512_maskz_loadu_ps(m1, c + 16));  \
    }                                                                         \
    _mm512_mask_storeu_ps(c, m0, c##r##_0);                                   \
    _mm512_mask_storeu_ps(c + 16, m1, c##r##_1);                              \
  }
  MINIGPT_FOR_ROWS(STORE)
#undef STORE
}
#undef MINIGPT_FOR_ROWS

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*,
                        int64_t, __mmask16, __mmask16, bool);

template <int... R>
constexpr auto make_tiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&micro_tile<R + 1>...};
}

__mmask16 mask_for(int64_t cols) {  // the first min(cols, 16) lanes, none when cols <= 0
  if (cols <= 0) return 0;
  if (cols >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << cols) - 1);
}

}  // namespace

bool gemm_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                 const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  static constexpr auto tiles = make_tiles(std::make_integer_sequence<int, kMR>{});
  for (int64_t j = 0; j < N; j += kNR) {  // a K x 32 panel of B, reused by every row tile
    const __mmask16 m0 = mask_for(N - j), m1 = mask_for(N - j - 16);
    for (int64_t i = 0; i < M; i += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i));
      tiles[static_cast<size_t>(mr - 1)](K, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j,
                                         ldc, m0, m1, accumulate);
    }
  }
}

__attribute__((target("avx512f"))) void gemv_rows_avx512(int64_t N, int64_t K, const float* x,
                                                         const float* W, int64_t ldw, float* y,
                                                         bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + n * ldw;
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(w + k), acc);
    const __mmask16 m = mask_for(K - k);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, w + k), acc);
    const float s = _mm512_reduce_add_ps(acc);
    y[n] = accumulate ? y[n] + s : s;
  }
}

}  // namespace minigpt::cpu
