// softmax_fused: the launcher of the fused family (kernels in softmax_fused_kernels.cuh), the
// untuned default config and the candidate configs the autotuner sweeps.
//
// Which variant holds a row of `cols` floats (fp32):
//   cols <= 4 * 32 * 16 = 2048    Rows: a sub-warp per row, the row in registers
//   cols <= 4 * 8 * 1024 * 16     Block: a block, or a cluster of up to 8 blocks, per row, in
//                                 registers (~ 512k floats at most)
//   cols * 4 + 16 <= opt-in smem  Smem: a block per row, the row in shared memory (~ 58k floats
//                                 on Hopper's 227 KB)
//   cols / cluster <= ~ 56k       Bulk: a block or a cluster of up to 8 per row, each block's
//                                 slice copied into shared memory by cp.async.bulk (~ 450k
//                                 floats with 8 blocks)
//   any cols                      Online: two reads (running max/sum, then write)
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"
#include "kernels/cuda/softmax_fused_kernels.cuh"

#include <climits>
#include <cstdint>

namespace minigpt::cuda {

using detail::FusedKernel;

namespace {

FusedKernel kernel_of(const FusedConfig& c) {
  switch (c.variant) {
    case FusedVariant::Rows:
      return detail::rows_kernel(c.threads_per_row, c.nv, c.vec, c.streaming, c.two_round);
    case FusedVariant::Block: return detail::block_kernel(c.nv, c.vec, c.streaming);
    case FusedVariant::Smem: return detail::smem_kernel(c.vec, c.streaming);
    case FusedVariant::Online: return detail::online_kernel(c.vec, c.streaming);
    case FusedVariant::Bulk: return c.vec == 4 ? detail::bulk_kernel(c.streaming) : nullptr;
  }
  return nullptr;
}

// Dynamic shared memory of a launch of `c` (0 for the variants with static shared memory only;
// the Smem variant's is set where it launches).
int64_t dynamic_smem_of(const FusedConfig& c, int64_t cols) {
  if (c.variant == FusedVariant::Bulk) return bulk_variant_bytes(cols, c.cluster);
  return 0;
}

cudaLaunchConfig_t cluster_launch(const FusedConfig& c, int64_t blocks, int64_t bytes, cudaStream_t stream,
                                  cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(c.threads_per_row));
  cfg.dynamicSmemBytes = static_cast<size_t>(bytes);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(c.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

int max_threads_of(FusedKernel fn) {
  cudaFuncAttributes a{};
  MINIGPT_CUDA_CHECK(cudaFuncGetAttributes(&a, fn));
  return a.maxThreadsPerBlock;
}

// Smallest compiled nv with capacity >= cols for `threads` lanes; 0 if none.
int smallest_nv(int64_t cols, int64_t threads) {
  for (int nv : kFusedNvChoices)
    if (int64_t{4} * threads * nv >= cols) return nv;
  return 0;
}

void launch(FusedKernel fn, const FusedConfig& c, const float* x, float* y, int64_t rows, int cols,
            cudaStream_t stream) {
  switch (c.variant) {
    case FusedVariant::Rows: {
      const int64_t blocks = (rows + c.rows_per_block - 1) / c.rows_per_block;
      MINIGPT_CUDA_REQUIRE(blocks <= INT_MAX, "softmax_fused: ", rows, " rows is too many");
      const dim3 block(static_cast<unsigned>(c.threads_per_row), static_cast<unsigned>(c.rows_per_block));
      fn<<<static_cast<unsigned>(blocks), block, 0, stream>>>(x, y, rows, cols, 1);
      break;
    }
    case FusedVariant::Block:
    case FusedVariant::Bulk: {
      const int64_t bytes = dynamic_smem_of(c, cols);
      if (bytes > 48 * 1024)  // above 48 KB a kernel must opt in
        MINIGPT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(bytes)));
      const int64_t blocks = rows * c.cluster;
      MINIGPT_CUDA_REQUIRE(blocks <= INT_MAX, "softmax_fused: ", rows, " rows x ", c.cluster, " blocks is too many");
      if (c.cluster == 1) {
        fn<<<static_cast<unsigned>(blocks), c.threads_per_row, static_cast<size_t>(bytes), stream>>>(x, y, rows, cols, 1);
      } else {
        cudaLaunchAttribute attr[1];
        const cudaLaunchConfig_t cfg = cluster_launch(c, blocks, bytes, stream, attr);
        MINIGPT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, x, y, rows, cols, c.cluster));
      }
      break;
    }
    case FusedVariant::Smem: {
      MINIGPT_CUDA_REQUIRE(rows <= INT_MAX, "softmax_fused: ", rows, " rows is too many");
      const int64_t bytes = smem_variant_bytes(cols);
      if (bytes > 48 * 1024)  // above 48 KB a kernel must opt in
        MINIGPT_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(bytes)));
      fn<<<static_cast<unsigned>(rows), c.threads_per_row, static_cast<size_t>(bytes), stream>>>(
          x, y, rows, cols, 1);
      break;
    }
    case FusedVariant::Online:
      MINIGPT_CUDA_REQUIRE(rows <= INT_MAX, "softmax_fused: ", rows, " rows is too many");
      fn<<<static_cast<unsigned>(rows), c.threads_per_row, 0, stream>>>(x, y, rows, cols, 1);
      break;
  }
  MINIGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

FusedLimits fused_limits() {
  int dev = 0;
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  FusedLimits l;
  MINIGPT_CUDA_CHECK(cudaDeviceGetAttribute(&l.smem_optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  MINIGPT_CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, dev));
  return l;
}

void softmax_fused(const float* x, float* y, int64_t rows, int64_t cols, const FusedConfig& config,
                   cudaStream_t stream) {
  MINIGPT_CUDA_REQUIRE(rows >= 0 && cols >= 1, "softmax_fused: bad shape (", rows, ", ", cols, ")");
  if (rows == 0) return;
  MINIGPT_CUDA_REQUIRE(x != nullptr && y != nullptr, "softmax_fused: null pointer");
  MINIGPT_CUDA_REQUIRE(cols <= INT_MAX / 4, "softmax_fused: rows of ", cols, " floats are too long");
  // 16-byte accesses need x and y rows at the same offset from a 16-byte boundary; otherwise
  // the same config runs with 4-byte accesses (same capacity: 4*nv floats per thread).
  FusedConfig c = config;
  const bool same_phase = (reinterpret_cast<uintptr_t>(x) & 15) == (reinterpret_cast<uintptr_t>(y) & 15);
  if (!same_phase && c.variant == FusedVariant::Bulk) {
    // The bulk copy and the 16-byte stores need x and y rows at the same phase: the online
    // kernel with 4-byte accesses serves the rest (any length, always launches).
    c = FusedConfig{};
    c.variant = FusedVariant::Online;
    c.threads_per_row = 1024;
    c.streaming = config.streaming;
  }
  if (!same_phase) c.vec = 1;
  int optin = 48 * 1024;
  if (c.variant == FusedVariant::Smem || c.variant == FusedVariant::Bulk) optin = fused_limits().smem_optin_bytes;
  MINIGPT_CUDA_REQUIRE(c.fits(cols, optin), "softmax_fused: config ", c.name(), " cannot hold rows of ", cols, " floats");
  FusedKernel fn = kernel_of(c);
  MINIGPT_CUDA_REQUIRE(fn != nullptr, "softmax_fused: config ", c.name(), " is not compiled");
  if (c.vec != config.vec && max_threads_of(fn) < c.block_threads()) {
    // The 4-byte twin of a register config can need more registers than its block allows
    // (block(1024, nv=8): 60 registers with 16-byte accesses, 96 with 4-byte ones): rows whose
    // x and y are misaligned differently then take the online kernel, which always launches.
    FusedConfig o;
    o.variant = FusedVariant::Online;
    o.threads_per_row = 1024;
    o.vec = 1;
    o.streaming = c.streaming;
    c = o;
    fn = kernel_of(c);
  }
  launch(fn, c, x, y, rows, static_cast<int>(cols), stream);
}

FusedConfig fused_default_config(int64_t cols, const FusedLimits& limits) {
  FusedConfig c;
  c.vec = 4;
  c.streaming = false;
  for (int tpr : {8, 16, 32}) {  // short rows: a sub-warp per row, <= 32 floats per lane
    const int nv = smallest_nv(cols, tpr);
    if (nv != 0 && nv <= 8) {
      c.variant = FusedVariant::Rows;
      c.threads_per_row = tpr;
      c.rows_per_block = 128 / tpr;
      c.nv = nv;
      return c;
    }
  }
  for (int cluster : {1, 2, 4, 8}) {  // long rows: a block (or cluster) per row, in registers
    for (int threads : {256, 512, 1024}) {
      const int nv = smallest_nv(cols, int64_t{threads} * cluster);
      if (nv != 0 && nv <= 8) {
        c.variant = FusedVariant::Block;
        c.threads_per_row = threads;
        c.cluster = cluster;
        c.nv = nv;
        // 1024 threads x nv 8 needs <= 64 registers per thread; nvcc's choice can exceed that.
        if (max_threads_of(kernel_of(c)) >= threads) return c;
      }
    }
  }
  c.threads_per_row = 1024;
  c.variant = smem_variant_bytes(cols) <= limits.smem_optin_bytes ? FusedVariant::Smem : FusedVariant::Online;
  return c;
}

std::vector<FusedConfig> fused_candidates(int64_t cols, const FusedLimits& limits) {
  std::vector<FusedConfig> out;
  auto add = [&](FusedConfig c) {
    if (!c.fits(cols, limits.smem_optin_bytes)) return;
    for (const FusedConfig& o : out)
      if (o == c) return;
    const FusedKernel fn = kernel_of(c);
    if (fn == nullptr || max_threads_of(fn) < c.block_threads()) return;  // too many registers
    const int64_t bytes = dynamic_smem_of(c, cols);
    if (bytes > 48 * 1024 &&
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (c.cluster > 1) {  // can a cluster of this size be resident at all?
      cudaLaunchAttribute attr[1];
      const cudaLaunchConfig_t cfg = cluster_launch(c, c.cluster, bytes, nullptr, attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg) != cudaSuccess || clusters < 1) {
        cudaGetLastError();
        return;
      }
    }
    out.push_back(c);
  };
  for (int vec : {4, 1}) {
    for (bool streaming : {false, true}) {
      FusedConfig c;
      c.vec = vec;
      c.streaming = streaming;
      // Rows: each sub-warp width with the smallest nv that holds the row, 32..512 threads,
      // both reduction kinds.
      for (int tpr : {4, 8, 16, 32}) {
        const int nv = smallest_nv(cols, tpr);
        if (nv == 0) continue;
        for (int rpb : {1, 2, 4, 8, 16, 32}) {
          if (tpr * rpb < 32 || tpr * rpb > 512) continue;
          for (bool two_round : {false, true}) {
            c.variant = FusedVariant::Rows;
            c.threads_per_row = tpr, c.rows_per_block = rpb, c.cluster = 1, c.nv = nv;
            c.two_round = two_round;
            add(c);
          }
        }
        c.two_round = false;
      }
      // Block (cluster): at least half of the held slots used.
      if (cols > 128) {
        for (int cluster : {1, 2, 4, 8}) {
          if (cluster > 1 && cols < 4096) continue;
          for (int threads : {64, 128, 256, 512, 1024}) {
            const int64_t lanes = int64_t{threads} * cluster;
            const int nv = smallest_nv(cols, lanes);
            if (nv == 0 || 2 * cols < 4 * lanes * nv) continue;
            c.variant = FusedVariant::Block;
            c.threads_per_row = threads, c.rows_per_block = 1, c.cluster = cluster, c.nv = nv;
            add(c);
          }
          // Exact fits: for each compiled nv, the fewest warps that hold the block's slice, so
          // that few held slots idle (50257 floats: cluster 8 x 416 threads x nv 4 = 94% used).
          const int64_t per_block = ((cols + 3) / 4 + cluster - 1) / cluster;  // float4s
          for (int nv : kFusedNvChoices) {
            const int64_t threads = ((per_block + nv - 1) / nv + 31) / 32 * 32;
            if (threads < 64 || threads > 1024) continue;
            c.variant = FusedVariant::Block;
            c.threads_per_row = static_cast<int>(threads), c.rows_per_block = 1, c.cluster = cluster, c.nv = nv;
            add(c);
          }
        }
      }
      if (cols >= 1024) {
        for (int threads : {256, 512, 1024}) {
          c.variant = FusedVariant::Smem;
          c.threads_per_row = threads, c.rows_per_block = 1, c.cluster = 1, c.nv = 1;
          add(c);
        }
        if (vec == 4) {
          for (int threads : {256, 1024}) {
            c.variant = FusedVariant::Online;
            c.threads_per_row = threads, c.rows_per_block = 1, c.cluster = 1, c.nv = 1;
            add(c);
          }
        }
      }
      if (cols >= 4096 && vec == 4) {  // Bulk: a slice of >= 2 KB per block
        for (int cluster : {1, 2, 4, 8}) {
          for (int threads : {128, 256, 512, 1024}) {
            c.variant = FusedVariant::Bulk;
            c.threads_per_row = threads, c.rows_per_block = 1, c.cluster = cluster, c.nv = 1;
            add(c);
          }
        }
      }
    }
  }
  if (out.empty()) {  // nothing above holds the row (very long rows): the online kernel
    FusedConfig c;
    c.variant = FusedVariant::Online;
    c.threads_per_row = 1024;
    out.push_back(c);
  }
  return out;
}

}  // namespace minigpt::cuda
