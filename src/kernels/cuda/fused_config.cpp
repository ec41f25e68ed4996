// FusedConfig names, shape rules and JSON form (see fused_config.h).
#include "kernels/cuda/fused_config.h"

#include "core/error.h"

#include <fmt/format.h>

namespace minigpt::cuda {

const char* variant_name(FusedVariant v) {
  switch (v) {
    case FusedVariant::Rows: return "rows";
    case FusedVariant::Block: return "block";
    case FusedVariant::Smem: return "smem";
    case FusedVariant::Online: return "online";
    case FusedVariant::Bulk: return "bulk";
  }
  return "?";
}

FusedVariant parse_variant(const std::string& name) {
  if (name == "rows") return FusedVariant::Rows;
  if (name == "block") return FusedVariant::Block;
  if (name == "smem") return FusedVariant::Smem;
  if (name == "online") return FusedVariant::Online;
  if (name == "bulk") return FusedVariant::Bulk;
  MINIGPT_FAIL("unknown fused softmax variant '{}' (expected rows, block, smem, online or bulk)", name);
}

bool is_compiled_nv(int nv) {
  for (int c : kFusedNvChoices)
    if (c == nv) return true;
  return false;
}

static bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

bool FusedConfig::fits(int64_t cols, int smem_optin_bytes) const {
  if (cols < 1 || (vec != 1 && vec != 4)) return false;
  if (two_round && variant != FusedVariant::Rows) return false;
  switch (variant) {
    case FusedVariant::Rows:
      // A sub-warp of 4..32 lanes; 16-byte rows need >= 8 lanes for the <= 6 head/tail floats.
      if (!is_pow2(threads_per_row) || threads_per_row < 4 || threads_per_row > 32) return false;
      if (vec == 4 && threads_per_row < 8) return false;
      if (rows_per_block < 1 || block_threads() > 1024 || !is_compiled_nv(nv)) return false;
      return cols <= int64_t{4} * threads_per_row * nv;
    case FusedVariant::Block:
      if (threads_per_row < 32 || threads_per_row > 1024 || threads_per_row % 32 != 0) return false;
      if (!is_pow2(cluster) || cluster > 8 || rows_per_block != 1 || !is_compiled_nv(nv)) return false;
      return cols <= int64_t{4} * cluster * threads_per_row * nv;
    case FusedVariant::Smem:
      if (threads_per_row < 32 || threads_per_row > 1024 || threads_per_row % 32 != 0) return false;
      return smem_variant_bytes(cols) <= smem_optin_bytes;
    case FusedVariant::Online:
      return threads_per_row >= 32 && threads_per_row <= 1024 && threads_per_row % 32 == 0;
    case FusedVariant::Bulk:
      if (threads_per_row < 32 || threads_per_row > 1024 || threads_per_row % 32 != 0) return false;
      if (!is_pow2(cluster) || cluster > 8 || rows_per_block != 1 || vec != 4) return false;
      return bulk_variant_bytes(cols, cluster) + kBulkStaticBytes <= smem_optin_bytes;
  }
  return false;
}

std::string FusedConfig::name() const {
  const char* cache = streaming ? "cs" : "ca";
  switch (variant) {
    case FusedVariant::Rows:
      return fmt::format("rows(tpr={},rpb={},nv={},vec{},{}{})", threads_per_row, rows_per_block,
                         nv, vec, cache, two_round ? ",2r" : "");
    case FusedVariant::Block:
      return fmt::format("block(threads={},cluster={},nv={},vec{},{})", threads_per_row, cluster,
                         nv, vec, cache);
    case FusedVariant::Bulk:
      return fmt::format("bulk(threads={},cluster={},vec{},{})", threads_per_row, cluster, vec, cache);
    case FusedVariant::Smem:
    case FusedVariant::Online:
      return fmt::format("{}(threads={},vec{},{})", variant_name(variant), threads_per_row, vec,
                         cache);
  }
  return "?";
}

}  // namespace minigpt::cuda
