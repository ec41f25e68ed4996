// NumPy .npy: parse (from bytes or a path) and write single arrays.
//
// Format: "\x93NUMPY", version (1.0, 2.0 or 3.0), header length (u16 for v1, u32 for v2/v3),
// a Python dict literal {'descr': ..., 'fortran_order': False, 'shape': (...), } padded with
// spaces and a newline, then the raw C-order data.
//
// The parser trusts nothing: the dict is parsed strictly (exactly those three keys, literal
// values only, no expressions), fortran_order must be False, descr one of '<f4' '<f8' '<i4'
// '<i8' '|u1' '<u1' '|i1' '<i1' (object and big-endian dtypes rejected by name: never pickle),
// and the data length must equal numel x item size (overflow checked) with nothing after it.
// What it does not do: convert between dtypes beyond the helpers below.
#pragma once

#include "core/tensor.h"
#include "io/dtype.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace minigpt::io {

inline constexpr uint64_t kNpyMaxHeader = 1u << 20;  // numpy itself refuses headers > 10000 bytes by default
inline constexpr size_t kNpyMaxRank = 32;            // numpy's own limit (NPY_MAXDIMS)

// A validated array inside a byte span: dtype, shape and where its data lies.
struct NpyArray {
  DType dtype;
  Shape shape;
  uint64_t data_begin = 0;  // byte offsets into the parsed span: [data_begin, data_end)
  uint64_t data_end = 0;
};

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& source);

// The .npy file bytes for C-order data of `dtype` (F32, F64, I32, I64, U8 or I8) and `shape`.
std::vector<uint8_t> encode_npy(DType dtype, const Shape& shape, std::span<const uint8_t> data);

// Token ids (any shape, e.g. (B, T)) as int32; from '<i4' or '<i8' arrays whose values are in
// [0, INT32_MAX].
struct TokenIds {
  std::vector<int32_t> ids;
  Shape shape;
};

// Typed views of parsed bytes. Each throws Error naming `source` on a dtype mismatch.
Tensor npy_to_tensor_f32(std::span<const uint8_t> bytes, const std::string& source);  // '<f4' only
TokenIds npy_to_token_ids(std::span<const uint8_t> bytes, const std::string& source);
std::vector<uint8_t> npy_to_u8(std::span<const uint8_t> bytes, const std::string& source, Shape* shape = nullptr);

// Files.
Tensor read_npy_f32(const std::string& path);
TokenIds read_npy_token_ids(const std::string& path);
void write_npy_f32(const std::string& path, const Tensor& tensor);  // atomic
std::vector<uint8_t> encode_npy_f32(const Tensor& tensor);           // CPU tensor, any strides
std::vector<uint8_t> encode_npy_u8(std::span<const uint8_t> values);  // 1-D

}  // namespace minigpt::io
