// FusedConfig: the launch parameters of the fused CUDA softmax (which variant, threads per row,
// rows per block, cluster size, floats held per thread, vector width, cache mode), their names
// Plain C++ that nvcc can also read (no fmt, no JSON: the JSON form is in autotune_cache.h).
// The kernels themselves are in softmax_fused*.cu; this file does not launch anything.
#pragma once

#include <cstdint>
#include <string>

namespace minigpt::cuda {

enum class FusedVariant {
  Rows,    // a sub-warp of threads_per_row (4..32) per row, row held in registers
  Block,   // a block (or a cluster of `cluster` blocks) per row, row held in registers
  Smem,    // a block per row, row held in dynamic shared memory (up to the opt-in limit)
  Online,  // a block per row, online max/sum in a first read, then read + write: any length
  Bulk,    // a block (or a cluster of `cluster` blocks) per row, its slice of the row copied
           // into shared memory by cp.async.bulk (sm_90); 16-byte rows only (vec 4)
};

const char* variant_name(FusedVariant v);
FusedVariant parse_variant(const std::string& name);  // throws Error on an unknown name

// The floats-per-thread/4 counts (nv) that are compiled for the Rows and Block variants.
inline constexpr int kFusedNvChoices[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16};
bool is_compiled_nv(int nv);

struct FusedConfig {
  FusedVariant variant = FusedVariant::Online;
  int threads_per_row = 256;  // Rows: sub-warp width 4..32; other variants: the block size
  int rows_per_block = 1;     // Rows only: sub-warps per block (block = threads_per_row x this)
  int cluster = 1;            // Block/Bulk: blocks cooperating on one row (thread-block cluster)
  int nv = 1;                 // Rows/Block: each thread holds 4*nv floats of its row
  int vec = 4;                // 4: 16-byte accesses on rows aligned alike, 1: 4-byte accesses
  bool streaming = false;     // true: __ldcs/__stcs (evict-first), false: default caching
  bool two_round = false;     // Rows only: reduce max then sum (true) or (max, sum) pairs once

  // Threads in one block, as launched.
  int block_threads() const { return variant == FusedVariant::Rows ? threads_per_row * rows_per_block : threads_per_row; }
  // Whether this config can hold and process a row of `cols` floats (shape rules only; the
  // kernel's register limits are checked where it is launched).
  bool fits(int64_t cols, int smem_optin_bytes) const;
  // "rows(tpr=32,rpb=4,nv=5,vec4,cs)": readable, stable, used in reports and the cache.
  std::string name() const;

  bool operator==(const FusedConfig& o) const {  // written out: the CUDA sources build as C++17
    return variant == o.variant && threads_per_row == o.threads_per_row &&
           rows_per_block == o.rows_per_block && cluster == o.cluster && nv == o.nv &&
           vec == o.vec && streaming == o.streaming && two_round == o.two_round;
  }
};

// Dynamic shared memory the Smem variant needs for a row of `cols` floats (16 B of slack for
// the alignment head).
inline int64_t smem_variant_bytes(int64_t cols) { return cols * 4 + 16; }
// Dynamic shared memory of one block of the Bulk variant: its slice of the row's 16-byte body.
inline int64_t bulk_variant_bytes(int64_t cols, int cluster) { return 16 * ((cols / 4 + cluster - 1) / cluster); }
// Static shared memory of the Bulk kernel (reduction scratch, cluster slots, mbarrier), kept
// free under the opt-in limit.
inline constexpr int64_t kBulkStaticBytes = 1024;

}  // namespace minigpt::cuda
