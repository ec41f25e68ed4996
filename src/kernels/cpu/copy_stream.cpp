#include "kernels/cpu/copy_stream.h"

#include "core/isa.h"
#include "kernels/cpu/simd_align.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace minigpt::cpu {

namespace {

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
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  return i;
}
#endif

}  // namespace

void copy_stream(const float* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  const bool avx512 = active_isa() == Isa::Avx512;
  const int64_t head = avx512 ? detail::head_to_boundary<64>(dst, n) : detail::head_to_boundary<16>(dst, n);
  copy_floats(src, dst, head);
  const int64_t body = avx512 ? stream_body_avx512(src + head, dst + head, n - head)
                              : stream_body_sse2(src + head, dst + head, n - head);
  copy_floats(src + head + body, dst + head + body, n - head - body);
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before returning
#else
  copy_floats(src, dst, n);
#endif
}

}  // namespace minigpt::cpu
