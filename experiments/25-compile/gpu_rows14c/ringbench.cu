// rows14c: the ceiling of gpt_mega_rows' weight stream. G CTAs each stream the same IMAGE bytes
// (the shipped model's 942 KB by default) from global memory (L2-resident after the first pass)
// into shared memory through a ring of S slots of P-byte cp.async.bulk pieces, as
// gpt_mega_rows.cu's Ring does, but with no arithmetic: a slot is refilled as soon as its piece
// has landed. Reports cycles per CTA (clock64, thread 0, from after the start's barrier to the
// last piece) and bytes per cycle per SM; the wall time by events.
//
// Modes: "own" (every CTA issues its own copies, as the kernel); "mc" (clusters of 16, every
// piece issued ONCE per cluster as a multicast copy into all 16 CTAs: the CTA that is the last to
// free a slot (an atomic counter per slot in CTA slot % 16) issues its refill; call 1's kernel
// variant mc, removed after it; the pieces' first and last floats are checked in every mode).
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ringbench.cu -o ringbench; run:
// ./ringbench [image bytes] [b: call 2's set, pieces of 17-102 KB]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__device__ __forceinline__ unsigned sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void expect_arrive(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sa(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wait_parity(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT;\n}\n" ::"r"(
          sa(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(sa(dst)),
               "l"(src), "r"(bytes), "r"(sa(bar))
               : "memory");
}
__device__ __forceinline__ void load_mc(void* dst, const void* src, unsigned bytes, uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::"r"(
          sa(dst)),
      "l"(src), "r"(bytes), "r"(sa(bar)), "h"(mask)
      : "memory");
}
__device__ __forceinline__ unsigned mapa(const void* p, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(sa(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ unsigned atom_add_cluster(unsigned remote, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.cluster.shared::cluster.add.u32 %0, [%1], %2;\n" : "=r"(old) : "r"(remote), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

constexpr int kMaxSlots = 32;

// One warp per CTA: lane 0 runs the ring.
template <bool kMc>
__global__ void ring_kernel(const float* img, int pieces, int piece_bytes, int slots, long long* cycles,
                            unsigned* bad) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) uint64_t bars[kMaxSlots];
  __shared__ unsigned counters[kMaxSlots];
  const int R = kMc ? 16 : 1;
  const unsigned r = kMc ? cluster_rank() : 0u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(sa(&bars[s])) : "memory");
      counters[s] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (kMc) cluster_sync();
  if (threadIdx.x != 0) return;
  const long long t0 = clock64();
  const float* src = img;
  auto slot = [&](int i) { return sm + static_cast<size_t>(i % slots) * piece_bytes; };
  // the first `slots` pieces
  for (int i = 0; i < slots && i < pieces; ++i) {
    expect_arrive(&bars[i], piece_bytes);
    if (!kMc)
      load(slot(i), reinterpret_cast<const char*>(src) + static_cast<size_t>(i) * piece_bytes, piece_bytes, &bars[i]);
    else if (i % R == static_cast<int>(r))
      load_mc(slot(i), reinterpret_cast<const char*>(src) + static_cast<size_t>(i) * piece_bytes, piece_bytes, &bars[i],
              0xffff);
  }
  unsigned errs = 0;
  for (int i = 0; i < pieces; ++i) {
    const int s = i % slots;
    wait_parity(&bars[s], static_cast<unsigned>((i / slots) & 1));
    // check: the piece's first and last float are the image's (the image holds float(index))
    const float* f = reinterpret_cast<const float*>(slot(i));
    const size_t base = static_cast<size_t>(i) * piece_bytes / 4;
    if (f[0] != static_cast<float>(base % 1000003) || f[piece_bytes / 4 - 1] != static_cast<float>((base + piece_bytes / 4 - 1) % 1000003))
      ++errs;
    const int j = i + slots;
    if (j >= pieces) continue;
    expect_arrive(&bars[s], piece_bytes);
    const char* from = reinterpret_cast<const char*>(src) + static_cast<size_t>(j) * piece_bytes;
    if (!kMc) {
      load(slot(j), from, piece_bytes, &bars[s]);
    } else {
      const unsigned old = atom_add_cluster(mapa(&counters[s], s % R), 1u);
      if (old % R == static_cast<unsigned>(R - 1)) load_mc(slot(j), from, piece_bytes, &bars[s], 0xffff);
    }
  }
  cycles[blockIdx.x] = clock64() - t0;
  if (errs) atomicAdd(bad, errs);
  if (kMc) {
    // no CTA may exit while a multicast it is the target of, or a counter it owns, is in use
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
  }
}

// "burst": N copies of P bytes issued at once (lane k of warp 0 issues copy k, as the kernel's start
// and refills do), each completion stamped by the lane waiting for it: in issue order ~450 cycles
// apart (one copy served after another) or all near the end (copies served side by side)? Modes:
// 0 warp 0 alone; 1 warps 1..15 spinning on the last copy's mbarrier meanwhile (the kernel's
// stages wait so); 2 warps 1..15 reading 16 KB of other shared memory as LDS.128 meanwhile (the
// kernel's GEMMs do): do waiters or shared-memory reads slow the copies down?
__global__ void burst_kernel(const float* img, int n, int piece_bytes, int mode, long long* done, float* sink) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) uint64_t bars[32];
  __shared__ volatile int finished;
  const int k = threadIdx.x;
  if (k < n) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(sa(&bars[k])) : "memory");
  if (k == 0) finished = 0;
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const long long t0 = clock64();
  if (k < 32) {
    if (k < n) {
      expect_arrive(&bars[k], piece_bytes);
      load(sm + static_cast<size_t>(k) * piece_bytes,
           reinterpret_cast<const char*>(img) + static_cast<size_t>(k) * piece_bytes, piece_bytes, &bars[k]);
      wait_parity(&bars[k], 0);
      done[blockIdx.x * 32 + k] = clock64() - t0;
      if (k == n - 1) finished = 1;
    }
  } else if (mode == 1) {
    wait_parity(&bars[n - 1], 0);
  } else if (mode == 2) {
    const float4* other = reinterpret_cast<const float4*>(sm + static_cast<size_t>(n) * piece_bytes);
    float acc = 0.f;
    int i = k;
    while (!finished) {
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float4 v = other[(i + 64 * u) & 1023];
        acc += v.x + v.y + v.z + v.w;
      }
      i += 17;
    }
    if (acc == 12345.f) *sink = acc;
  }
}

void burst(const float* img, long long* done, float* sink, int G, int n, int P, int mode) {
  const int smem = n * P + 16384;
  CK(cudaFuncSetAttribute(burst_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int w = 0; w < 3; ++w) burst_kernel<<<G, 512, smem>>>(img, n, P, mode, done, sink);
  CK(cudaDeviceSynchronize());
  std::vector<long long> h(G * 32);
  CK(cudaMemcpy(h.data(), done, G * 32 * sizeof(long long), cudaMemcpyDeviceToHost));
  std::printf("burst mode %d, CTAs %d, %d copies of %d bytes issued at once, cycles to each completion (CTA 0):", mode, G,
              n, P);
  for (int k = 0; k < n; ++k) std::printf(" %lld", h[k]);
  std::printf("\n");
}

int main(int argc, char** argv) {
  const size_t image_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 942 * 1024;
  const size_t max_bytes = 64ull << 20;
  std::vector<float> host(max_bytes / 4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000003);
  float* img;
  CK(cudaMalloc(&img, max_bytes));
  CK(cudaMemcpy(img, host.data(), max_bytes, cudaMemcpyHostToDevice));
  long long* cyc;
  unsigned* bad;
  CK(cudaMalloc(&cyc, 1024 * sizeof(long long)));
  CK(cudaMalloc(&bad, sizeof(unsigned)));
  CK(cudaMemset(bad, 0, sizeof(unsigned)));
  int clk_khz = 0;
  CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
  const bool big = argc > 2 && argv[2][0] == 'b';  // rows14c call 2: bigger pieces, 1 and 32 CTAs, no multicast
  const int smem_max = 210 * 1024;
  CK(cudaFuncSetAttribute(ring_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  CK(cudaFuncSetAttribute(ring_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  CK(cudaFuncSetAttribute(ring_kernel<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("image %zu bytes, clock %d MHz (attribute)\n", image_bytes, clk_khz / 1000);
  std::printf("%-4s %5s %6s %5s %9s %9s %9s %8s %9s %s\n", "mode", "CTAs", "piece", "slots", "cyc_avg", "cyc_max",
              "B/clk/SM", "us", "GB/s_all", "errors");
  if (big) {
    float* sink;
    CK(cudaMalloc(&sink, sizeof(float)));
    for (int mode = 0; mode < 3; ++mode) {
      burst(img, cyc, sink, 1, 11, 17408, mode);
      burst(img, cyc, sink, 32, 11, 17408, mode);
      burst(img, cyc, sink, 1, 5, 34816, mode);
      burst(img, cyc, sink, 1, 3, 69632, mode);
    }
  }
  const std::vector<int> piece_list =
      big ? std::vector<int>{17408, 34816, 52224, 69632, 104448} : std::vector<int>{8192, 17408, 32768};
  const std::vector<int> grid_list = big ? std::vector<int>{1, 32} : std::vector<int>{1, 16, 32, 128};
  for (int mc = 0; mc < (big ? 1 : 2); ++mc)
    for (int G : grid_list) {
      if (mc && G < 16) continue;
      for (int P : piece_list) {
        const int max_slots = smem_max / P < kMaxSlots ? smem_max / P : kMaxSlots;
        std::vector<int> slot_list;
        for (int S : {1, 2, 4, 8, max_slots})
          if (S <= max_slots && (slot_list.empty() || slot_list.back() < S)) slot_list.push_back(S);
        for (int slots : slot_list) {
          const int pieces = static_cast<int>(image_bytes / P);
          const size_t smem = static_cast<size_t>(slots) * P;
          cudaLaunchConfig_t cfg{};
          cudaLaunchAttribute attr[1];
          cfg.gridDim = dim3(G);
          cfg.blockDim = dim3(32);
          cfg.dynamicSmemBytes = smem;
          cfg.numAttrs = 0;
          if (mc) {
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = 16;
            attr[0].val.clusterDim.y = 1;
            attr[0].val.clusterDim.z = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
          }
          auto launch = [&] {
            if (mc)
              CK(cudaLaunchKernelEx(&cfg, ring_kernel<true>, (const float*)img, pieces, P, slots, cyc, bad));
            else
              CK(cudaLaunchKernelEx(&cfg, ring_kernel<false>, (const float*)img, pieces, P, slots, cyc, bad));
          };
          for (int w = 0; w < 3; ++w) launch();
          CK(cudaDeviceSynchronize());
          const int reps = 20;
          std::vector<long long> c(G);
          double avg = 0, mx = 0;
          CK(cudaEventRecord(e0));
          for (int rep = 0; rep < reps; ++rep) launch();
          CK(cudaEventRecord(e1));
          CK(cudaDeviceSynchronize());
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          CK(cudaMemcpy(c.data(), cyc, G * sizeof(long long), cudaMemcpyDeviceToHost));
          for (long long v : c) {
            avg += static_cast<double>(v) / G;
            mx = v > mx ? v : mx;
          }
          unsigned errs = 0;
          CK(cudaMemcpy(&errs, bad, sizeof(unsigned), cudaMemcpyDeviceToHost));
          const double bytes = static_cast<double>(pieces) * P;
          const double us = ms * 1000.0 / reps;
          std::printf("%-4s %5d %6d %5d %9.0f %9.0f %9.1f %8.2f %9.0f %u\n", mc ? "mc" : "own", G, P, slots, avg, mx,
                      bytes / avg, us, bytes * G / (us * 1e3), errs);
          std::fflush(stdout);
        }
      }
    }
  return 0;
}
