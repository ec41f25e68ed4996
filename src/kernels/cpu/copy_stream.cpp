#include "kernels/cpu/copy_stream.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace minigpt::cpu {

namespace {

// Floats before p reaches the next multiple of `align` bytes (0 when already there).
int64_t floats_to_alignment(const float* p, uintptr_t align) {
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(p) & (align - 1);
  return misalign == 0 ? 0 : static_cast<int64_t>((align - misalign) / sizeof(float));
}

void copy_floats(const float* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

#if defined(__x86_64__)
// Four lines per iteration: four loads in flight before the stores that need them.
__attribute__((target("avx512f"))) int64_t stream_body_avx512(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
    const __m512 c = _mm512_loadu_ps(src + i + 32), d = _mm512_loadu_ps(src + i + 48);
    _mm512_stream_ps(dst + i, a);
    _mm512_stream_ps(dst + i + 16, b);
    _mm512_stream_ps(dst + i + 32, c);
    _mm512_stream_ps(dst + i + 48, d);
  }
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  return i;
}

int64_t stream_body_sse2(const float* src, float* dst, int64_t n) {  // baseline x86-64
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; k += 4) _mm_stream_ps(dst + i + k, _mm_loadu_ps(src + i + k));
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  return i;
}
#endif

}  // namespace

void copy_stream_with(bool avx512, const float* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  const uintptr_t align = avx512 ? 64 : 16;
  if (reinterpret_cast<uintptr_t>(dst) % sizeof(float) == 0) {  // else nothing can align it
    const int64_t head = std::min(n, floats_to_alignment(dst, align));
    copy_floats(src, dst, head);
    const int64_t body = avx512 ? stream_body_avx512(src + head, dst + head, n - head)
                                : stream_body_sse2(src + head, dst + head, n - head);
    copy_floats(src + head + body, dst + head + body, n - head - body);
    _mm_sfence();  // streaming stores are weakly ordered: make them visible before returning
    return;
  }
#else
  (void)avx512;
#endif
  copy_floats(src, dst, n);
}

void copy_stream(const float* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
#else
  constexpr bool avx512 = false;
#endif
  copy_stream_with(avx512, src, dst, n);
}

}  // namespace minigpt::cpu
