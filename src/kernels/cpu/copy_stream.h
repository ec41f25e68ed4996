// copy_stream: dst = src through non-temporal (streaming) stores, the CPU bench's second
// copy method beside memcpy for the copy ceiling.
//
// Why a second method: memcpy's regular stores read each destination line into the cache
// before overwriting it (a read for ownership), so a copy of N bytes moves 3N through memory
// where streaming stores move 2N. On one or two cores that hardly matters (what bounds a
// core is how many misses it keeps in flight), but once enough cores share the memory
// controllers, bandwidth is the bound, and softmax_simd, whose stores stream above
// kStreamBytes, outran a memcpy ceiling by 1.4x at 16 threads on the GPU host. The ceiling is
// the faster of the two copies (cmd_bench_softmax.cpp).
#pragma once

#include <cstdint>

namespace minigpt::cpu {

// Copies n floats; src and dst must not overlap. The destination's aligned body goes out with
// 64-byte (AVX-512) or 16-byte (SSE2) streaming stores, followed by a store fence, so the
// data is visible to other threads on return; the unaligned head and tail use memcpy. The store
// width follows active_isa() (core/isa.h): 64-byte stores on avx512; 16-byte SSE2 stores, the
// x86-64 baseline, on scalar and avx2.
void copy_stream(const float* src, float* dst, int64_t n);

}  // namespace minigpt::cpu
