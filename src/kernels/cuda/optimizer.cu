// Gradient norm, clipping and AdamW on the GPU (optimizer.h).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/train_reduce.cuh"

namespace minigpt::cuda {
namespace {

constexpr int kThreads = 256;

// Stage 2, the finishing: one warp adds the kNormBlocks partials in order of lane then a fixed
// shuffle tree, and writes the norm and the clip factor.
__device__ void finish_norm(const double* partials, float max_norm, GradNorm* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < kNormBlocks; i += 32) s += __ldcg(partials + i);  // other blocks wrote them
  s = detail::warp_sum(s);
  if (threadIdx.x == 0) {
    const double norm = sqrt(s);
    out->norm = norm;
    // as clip_grad_norm (train/adamw.cpp) and torch.nn.utils.clip_grad_norm_
    out->scale = max_norm > 0.0f && norm > max_norm
                     ? static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6))
                     : 1.0f;
  }
}

// Stage 1: block b sums x^2 over the grid-stride elements it owns, in double; the block's 256
// partials are added in a fixed tree. The grid is always kNormBlocks: the order never depends
// on the device. The last block to finish (a counter after __threadfence, in the scratch's
// last slot) runs stage 2 and leaves the counter 0: one launch, graph replays need no memset.
__global__ void sum_squares(const float* __restrict__ x, int64_t n, double* __restrict__ partials,
                            float max_norm, GradNorm* out) {
  __shared__ double part[kThreads];
  __shared__ bool last;
  double s = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kNormBlocks) * kThreads) {
    const double v = x[i];
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  unsigned* counter = reinterpret_cast<unsigned*>(partials + kNormBlocks);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = part[0];
    __threadfence();  // publish the partial before counting this block in
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(kNormBlocks - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x < 32) finish_norm(partials, max_norm, out);
  if (threadIdx.x == 0) *counter = 0;  // ready for the next call (or graph replay)
}

// One block per chunk (kAdamWThreads threads, kAdamWUnroll elements each in flight: all of a
// kAdamWChunk chunk's loads issued before the first update, instead of a latency per element).
// __fmul_rn / __fadd_rn / __fsqrt_rn / __fdiv_rn: no contraction into fused multiply-adds, so
// each operation rounds as the CPU's adamw_update does.
constexpr int kAdamWThreads = 1024, kAdamWUnroll = 4;
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                 float* __restrict__ v, const AdamWChunk* __restrict__ chunks,
                 const AdamWScalars* __restrict__ sc, const GradNorm* __restrict__ gn) {
  const double norm = gn->norm;
  if (!isfinite(norm)) return;  // diverged: leave every parameter as it was
  const AdamWChunk ch = chunks[blockIdx.x];
  const AdamWScalars s = *sc;
  const float scale = gn->scale;
  const float decay = ch.decays ? s.decay : 1.0f;
  for (int64_t i0 = ch.begin + threadIdx.x; i0 < ch.end; i0 += kAdamWUnroll * kAdamWThreads) {
    float gv[kAdamWUnroll], mv[kAdamWUnroll], vv[kAdamWUnroll], pv[kAdamWUnroll];
#pragma unroll
    for (int u = 0; u < kAdamWUnroll; ++u) {
      const int64_t i = i0 + u * kAdamWThreads;
      const bool in = i < ch.end;
      gv[u] = in ? g[i] : 0.0f;
      mv[u] = in ? m[i] : 0.0f;
      vv[u] = in ? v[i] : 0.0f;
      pv[u] = in ? p[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kAdamWUnroll; ++u) {
      const int64_t i = i0 + u * kAdamWThreads;
      if (i >= ch.end) break;
      const float gi = scale == 1.0f ? gv[u] : __fmul_rn(gv[u], scale);
      const float mi = __fadd_rn(__fmul_rn(s.b1, mv[u]), __fmul_rn(s.one_b1, gi));
      const float vi = __fadd_rn(__fmul_rn(s.b2, vv[u]), __fmul_rn(__fmul_rn(s.one_b2, gi), gi));
      m[i] = mi;
      v[i] = vi;
      const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), s.inv_sqrt_bc2), s.eps);
      p[i] = __fsub_rn(__fmul_rn(pv[u], decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
    }
  }
}

}  // namespace

void grad_norm(const float* grads, int64_t n, double* partials, float max_norm, GradNorm* out,
               cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(n >= 0, "grad_norm: negative size ", n);
  sum_squares<<<kNormBlocks, kThreads, 0, stream>>>(grads, n, partials, max_norm, out);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

void adamw(float* params, const float* grads, float* m, float* v, const AdamWChunk* chunks,
           int64_t n_chunks, const AdamWScalars* scalars, const GradNorm* norm,
           cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(n_chunks >= 0 && n_chunks < (int64_t{1} << 31), "adamw: bad chunk count ", n_chunks);
  if (n_chunks == 0) return;
  adamw_kernel<<<static_cast<unsigned>(n_chunks), kAdamWThreads, 0, stream>>>(params, grads, m, v, chunks,
                                                                         scalars, norm);
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
