// Fused softmax cross-entropy on the GPU (cross_entropy.h). A warp per row: max, the sum of
// exp(x - max) in double, then the gradient row exp(x - m) * (1/count) / s with 1/count taken
// from the target, as kernels/cpu/cross_entropy.cpp. Every warp counts the targets itself (N
// ints from L2), which saves a launch. A one-block kernel sums the row losses in row order.
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

using detail::warp_sum;

constexpr int kWarps = 8;

__device__ int count_targets(const int32_t* targets, int N, int lane) {
  int n = 0;
#pragma unroll 16
  for (int i = lane; i < N; i += 32) n += targets[i] != -1;  // 16 loads in flight
  return warp_sum(n);
}

__global__ void cross_entropy_rows(const float* logits, const int32_t* __restrict__ targets,
                                   float* dlogits, double* __restrict__ row_loss, int N, int V) {
  const int row = blockIdx.x * kWarps + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const int count = count_targets(targets, N, lane);
  const float* x = logits + static_cast<int64_t>(row) * V;
  float* dx = dlogits + static_cast<int64_t>(row) * V;
  const int t = targets[row];
  if (t == -1) {  // ignored position: no loss, zero gradient row
    for (int v = lane; v < V; v += 32) dx[v] = 0.0f;
    if (lane == 0) row_loss[row] = 0.0;
    return;
  }
  const float xt = x[t];  // read before dx (maybe x) is written
  float m = -INFINITY;
  for (int v = lane; v < V; v += 32) m = fmaxf(m, x[v]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  double s = 0.0;
  for (int v = lane; v < V; v += 32) s += expf(x[v] - m);
  s = warp_sum(s);
  const double inv_count = 1.0 / count;
  const float scale = static_cast<float>(inv_count / s);
  __syncwarp();
  for (int v = lane; v < V; v += 32) dx[v] = expf(x[v] - m) * scale;
  __syncwarp();
  if (lane == 0) {
    dx[t] -= static_cast<float>(inv_count);
    row_loss[row] = static_cast<double>(m) + log(s) - static_cast<double>(xt);
  }
}

// loss = sum of row_loss in row order / count: thread i sums rows i, i + 1024, ... and the
// 1024 partials are added in a fixed tree.
__global__ void cross_entropy_mean(const double* __restrict__ row_loss,
                                   const int32_t* __restrict__ targets, float* loss, int N) {
  __shared__ double part[1024];
  __shared__ int cnt[1024];
  double s = 0.0;
  int n = 0;
  for (int i = threadIdx.x; i < N; i += 1024) {
    s += row_loss[i];
    n += targets[i] != -1;
  }
  part[threadIdx.x] = s;
  cnt[threadIdx.x] = n;
  __syncthreads();
  for (int w = 512; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      part[threadIdx.x] += part[threadIdx.x + w];
      cnt[threadIdx.x] += cnt[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = cnt[0] > 0 ? static_cast<float>(part[0] * (1.0 / cnt[0])) : 0.0f;
}

void check_sizes(int64_t N, int64_t V) {
  MINIGPT_CUDA_REQUIRE(N >= 0 && V >= 1 && N < (int64_t{1} << 31) && V < (int64_t{1} << 31),
                       "cross_entropy: bad sizes N=", N, " V=", V);
}
}  // namespace

void cross_entropy_rows_grad(const float* logits, const int32_t* targets, float* dlogits, double* row_loss,
                             int64_t N, int64_t V, cudaStream_t stream) {
  check_sizes(N, V);
  if (N == 0) return;
  cross_entropy_rows<<<static_cast<unsigned>((N + kWarps - 1) / kWarps), dim3(32, kWarps), 0, stream>>>(
      logits, targets, dlogits, row_loss, static_cast<int>(N), static_cast<int>(V));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_mean_loss(const double* row_loss, const int32_t* targets, float* loss, int64_t N,
                             cudaStream_t stream) {
  check_sizes(N, 1);
  cross_entropy_mean<<<1, 1024, 0, stream>>>(row_loss, targets, loss, static_cast<int>(N));
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward_backward(const float* logits, const int32_t* targets, float* dlogits,
                                    double* row_loss, float* loss, int64_t N, int64_t V,
                                    cudaStream_t stream) {
  check_sizes(N, V);
  cross_entropy_rows_grad(logits, targets, dlogits, row_loss, N, V, stream);
  cross_entropy_mean_loss(row_loss, targets, loss, N, stream);
}

}  // namespace minigpt::cuda
