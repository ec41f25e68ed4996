#include "io/dtype.h"

#include <array>
#include <limits>
#include <utility>

namespace minigpt::io {

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8}, {DType::I32, "I32", 4}, {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
    {DType::U64, "U64", 8}, {DType::U32, "U32", 4}, {DType::U16, "U16", 2}, {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
}};
}  // namespace

const char* dtype_name(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }
size_t dtype_size(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kDTypes)
    if (name == info.name) return info.dtype;
  return std::nullopt;
}

std::optional<uint64_t> checked_byte_size(const std::vector<int64_t>& shape, DType dtype) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero = dtype_size(dtype);  // product of the non-zero dims, times the item size
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMax / static_cast<uint64_t>(d)) return std::nullopt;
    nonzero *= static_cast<uint64_t>(d);
  }
  return empty ? 0 : nonzero;
}

}  // namespace minigpt::io
