// DType: the element types a tensor file may declare, with their names and sizes.
//
// Defines the closed list of dtypes the loaders accept (safetensors names: F32, I64, ...) and
// their byte sizes. It does not convert between types: loaders hand out raw bytes plus the
// dtype, and the caller decides which dtypes it can use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace minigpt::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BOOL", ...
size_t dtype_size(DType dtype);       // bytes per element
std::optional<DType> dtype_from_name(std::string_view name);  // nullopt for an unknown name

}  // namespace minigpt::io
