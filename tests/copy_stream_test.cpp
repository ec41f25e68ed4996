// copy_stream (the bench's streaming-store copy) on the active ISA (core/isa.h; ctest runs this
// once per ISA the CPU has): every length and every alignment of source and destination, the
// floats around the destination left untouched.
#include "kernels/cpu/copy_stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace minigpt::cpu {
namespace {

void check_every_length_and_offset() {
  constexpr int64_t kGuard = 32;  // floats on each side of the destination
  std::vector<float> src(70000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 200; ++n) lengths.push_back(n);
  for (int64_t n : {1023, 4096, 4097, 65536 + 3}) lengths.push_back(n);
  std::vector<float> dst(70000 + 2 * kGuard + 64);
  for (int64_t src_offset : {0, 1, 5, 16}) {
    for (int64_t dst_offset = 0; dst_offset < 17; ++dst_offset) {
      for (int64_t n : lengths) {
        std::fill(dst.begin(), dst.end(), -1.0f);
        float* d = dst.data() + kGuard + dst_offset;
        copy_stream(src.data() + src_offset, d, n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(d[i], src[static_cast<size_t>(src_offset + i)])
              << "n " << n << " src+" << src_offset << " dst+" << dst_offset << " at " << i;
        for (int64_t i = -kGuard - dst_offset; i < 0; ++i) ASSERT_EQ(d[i], -1.0f) << "wrote before dst";
        for (int64_t i = n; i < n + kGuard; ++i) ASSERT_EQ(d[i], -1.0f) << "wrote past dst + n, n " << n;
      }
    }
  }
}

TEST(CopyStream, ActiveIsaEveryLengthAndOffset) { check_every_length_and_offset(); }

TEST(CopyStream, DefaultPathCopies) {
  std::vector<float> src(1000, 3.0f), dst(1000, 0.0f);
  copy_stream(src.data(), dst.data(), 1000);
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace minigpt::cpu
