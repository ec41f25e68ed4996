// safetensors: parse (from bytes or a path) and write the Hugging Face tensor file format.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data region.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data region) plus an optional "__metadata__" object of string -> string.
//
// The parser trusts nothing: N is capped and must fit in the file; the header must be a JSON
// object with no duplicate keys; every dtype is known, every shape non-negative, every byte size
// (overflow checked) equals numel x dtype size; the tensors' byte ranges, sorted, tile the data
// region exactly from 0 to the end of the file (no gap, no overlap, nothing after). Every Error
// names the source (the path, or what the caller passed) and the problem.
// What it does not do: convert dtypes or build Tensors (callers check dtype and copy).
#pragma once

#include "core/tensor.h"
#include "io/dtype.h"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace minigpt::io {

// Header length cap: larger headers are rejected before any allocation (the Rust reference
// uses the same 100 MB limit).
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // absolute byte offsets into the file: [begin, end)
  uint64_t end = 0;
};

// The parsed header; entries sorted by offset (file order). Offsets index the parsed bytes.
struct SafetensorsIndex {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;
  uint64_t data_start = 0;  // 8 + header length

  const SafetensorsEntry* find(const std::string& name) const;  // nullptr if absent
};

// Validates `bytes` as a complete safetensors file. `source` names it in errors.
SafetensorsIndex parse_safetensors(std::span<const uint8_t> bytes, const std::string& source);

// A file read from disk: its bytes plus the validated index.
struct SafetensorsFile {
  std::string path;
  std::vector<uint8_t> bytes;
  SafetensorsIndex index;

  std::span<const uint8_t> data(const SafetensorsEntry& entry) const {
    return std::span<const uint8_t>(bytes).subspan(entry.begin, entry.end - entry.begin);
  }
  // The named tensor as a CPU float32 Tensor (a copy); Error if absent or not F32.
  Tensor tensor_f32(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::string& path);

// One tensor to write: raw little-endian bytes whose size must be numel(shape) x dtype size.
struct SafetensorsItem {
  std::string name;
  DType dtype;
  Shape shape;
  std::span<const uint8_t> data;
};

// A float32 CPU tensor's bytes as an item (the tensor must be contiguous and outlive the item).
SafetensorsItem f32_item(const std::string& name, const Tensor& tensor);

// The file bytes: header written as the reference writer does (tensors in the given order,
// data contiguous, header padded with spaces to a multiple of 8 bytes). Names must be unique,
// non-empty and not "__metadata__".
std::vector<uint8_t> encode_safetensors(const std::vector<SafetensorsItem>& items,
                                        const std::map<std::string, std::string>& metadata);
// encode_safetensors, written atomically (io/atomic_file.h).
void write_safetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                       const std::map<std::string, std::string>& metadata);

}  // namespace minigpt::io
