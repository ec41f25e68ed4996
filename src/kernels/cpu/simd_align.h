// head_to_boundary: how many floats a vector loop must handle one by one (or masked) before
// its stores reach an aligned address. Shared by the softmax pipeline (softmax_simd_ops.h) and
// the bench's streaming copy (copy_stream.cpp): streaming stores (vmovntps) need one, and
// ordinary stores that straddle cache lines are slower.
#pragma once

#include <cstdint>

namespace minigpt::cpu::detail {

// The floats of y[0, n) before its first kBytes boundary (0 when y is already on one).
template <int kBytes>
inline int64_t head_to_boundary(const float* y, int64_t n) {
  const auto floats = static_cast<int64_t>((kBytes - reinterpret_cast<uintptr_t>(y) % kBytes) % kBytes / sizeof(float));
  return floats < n ? floats : n;
}

}  // namespace minigpt::cpu::detail
