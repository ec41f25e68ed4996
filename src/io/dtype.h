// DType: the element types a tensor file may declare, with their names and sizes.
//
// Defines the closed list of dtypes the loaders accept (safetensors names: F32, I64, ...) and
// their byte sizes. It does not convert between types: loaders hand out raw bytes plus the
// dtype, and the caller decides which dtypes it can use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>
#include <string_view>

namespace minigpt::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BOOL", ...
size_t dtype_size(DType dtype);       // bytes per element
std::optional<DType> dtype_from_name(std::string_view name);  // nullopt for an unknown name

// numel(shape) x dtype_size(dtype), or nullopt when it overflows. Stricter than the plain
// product: the non-zero dimensions alone, times the item size, must fit in int64, so that an
// empty tensor of shape (0, 2^40, 2^40) is rejected too (its strides would overflow).
// Dimensions must be non-negative (nullopt otherwise).
std::optional<uint64_t> checked_byte_size(const std::vector<int64_t>& shape, DType dtype);

}  // namespace minigpt::io
