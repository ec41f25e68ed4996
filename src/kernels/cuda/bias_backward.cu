// Bias gradient on the GPU (linear.h): column sums of dy (N, out) in double, fixed order.
#include "kernels/cuda/linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

__global__ void column_sums(const float* __restrict__ dy, float* __restrict__ db, int N, int out) {
  __shared__ double smem[detail::kColRows * 32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double s = 0.0;
  if (c < out)
    for (int r = threadIdx.y; r < N; r += detail::kColRows) s += dy[static_cast<int64_t>(r) * out + c];
  s = detail::column_total(s, smem);
  if (threadIdx.y == 0 && c < out) db[c] = static_cast<float>(s);
}

}  // namespace

void bias_backward(const float* dy, float* db, int64_t N, int64_t out, cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && out >= 1 && N < (int64_t{1} << 31) && out < (1 << 24),
                       "bias_backward: bad sizes N=", N, " out=", out);
  column_sums<<<static_cast<unsigned>((out + 31) / 32), dim3(32, detail::kColRows), 0, stream>>>(
      dy, db, static_cast<int>(N), static_cast<int>(out));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
