#include "io/safetensors.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_bytes.h"
#include "io/json_strict.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

namespace minigpt::io {

// Tensor bytes are copied as they are: the formats are little-endian, and so is every host we
// build for.
static_assert(std::endian::native == std::endian::little, "io/ assumes a little-endian host");

namespace {

using json = nlohmann::json;

constexpr size_t kMaxRank = 16;  // far above any real tensor; bounds the work per entry

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_u64_le(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A JSON value as a non-negative integer (shape dims, offsets); Error otherwise.
uint64_t as_u64(const json& v, const std::string& source, const std::string& name, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  MINIGPT_CHECK(v.is_number_integer(), "{}: tensor '{}': {} must hold integers, got {}", source, name, field,
                v.dump(-1, ' ', false, json::error_handler_t::replace));
  const int64_t s = v.get<int64_t>();
  MINIGPT_CHECK(s >= 0, "{}: tensor '{}': {} must be non-negative, got {}", source, name, field, s);
  return static_cast<uint64_t>(s);
}

// numel(shape) x dtype size, or an Error naming the tensor on overflow.
uint64_t byte_size(const Shape& shape, DType dtype, const std::string& source, const std::string& name) {
  const auto size = checked_byte_size(shape, dtype);
  MINIGPT_CHECK(size.has_value(), "{}: tensor '{}': shape {} of {} overflows the byte size", source, name, shape_str(shape),
                dtype_name(dtype));
  return *size;
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, const std::string& source, uint64_t data_size) {
  MINIGPT_CHECK(!name.empty(), "{}: a tensor has an empty name", source);
  MINIGPT_CHECK(v.is_object(), "{}: tensor '{}': entry must be a JSON object", source, name);
  for (const auto& [key, value] : v.items())
    MINIGPT_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", "{}: tensor '{}': unknown field '{}'",
                  source, name, key);
  MINIGPT_CHECK(v.contains("dtype") && v["dtype"].is_string(), "{}: tensor '{}': missing or non-string dtype", source, name);
  MINIGPT_CHECK(v.contains("shape") && v["shape"].is_array(), "{}: tensor '{}': missing or non-array shape", source, name);
  MINIGPT_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array(), "{}: tensor '{}': missing or non-array data_offsets",
                source, name);

  SafetensorsEntry e;
  e.name = name;
  const auto& dtype_str = v["dtype"].get_ref<const std::string&>();
  const auto dtype = dtype_from_name(dtype_str);
  MINIGPT_CHECK(dtype.has_value(), "{}: tensor '{}': unknown dtype '{}'", source, name, dtype_str);
  e.dtype = *dtype;

  const auto& shape = v["shape"];
  MINIGPT_CHECK(shape.size() <= kMaxRank, "{}: tensor '{}': shape has {} dimensions, more than {}", source, name,
                shape.size(), kMaxRank);
  for (const auto& d : shape) {
    const uint64_t ud = as_u64(d, source, name, "shape");
    MINIGPT_CHECK(ud <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "{}: tensor '{}': dimension {} too large",
                  source, name, ud);
    e.shape.push_back(static_cast<int64_t>(ud));
  }

  const auto& offsets = v["data_offsets"];
  MINIGPT_CHECK(offsets.size() == 2, "{}: tensor '{}': data_offsets must be [begin, end], got {} values", source, name,
                offsets.size());
  const uint64_t begin = as_u64(offsets[0], source, name, "data_offsets");
  const uint64_t end = as_u64(offsets[1], source, name, "data_offsets");
  MINIGPT_CHECK(begin <= end, "{}: tensor '{}': data_offsets begin {} > end {}", source, name, begin, end);
  MINIGPT_CHECK(end <= data_size, "{}: tensor '{}': data_offsets [{}, {}] out of range: the data region has {} bytes",
                source, name, begin, end, data_size);
  const uint64_t expected = byte_size(e.shape, e.dtype, source, name);
  MINIGPT_CHECK(end - begin == expected, "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}",
                source, name, begin, end, end - begin, shape_str(e.shape), dtype_name(e.dtype), expected);
  e.begin = begin;
  e.end = end;
  return e;
}

}  // namespace

const SafetensorsEntry* SafetensorsIndex::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsIndex parse_safetensors(std::span<const uint8_t> bytes, const std::string& source) {
  MINIGPT_CHECK(bytes.size() >= 8, "{}: truncated safetensors file: {} bytes, the header length alone needs 8", source,
                bytes.size());
  const uint64_t header_len = read_u64_le(bytes.data());
  MINIGPT_CHECK(header_len <= kSafetensorsMaxHeader, "{}: header length {} exceeds the {} byte limit", source, header_len,
                kSafetensorsMaxHeader);
  MINIGPT_CHECK(header_len <= bytes.size() - 8, "{}: header length {} runs past the end of the file ({} bytes)", source,
                header_len, bytes.size());
  MINIGPT_CHECK(header_len >= 2, "{}: header length {} is too small for a JSON object", source, header_len);

  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(header_len));
  const json header = parse_json_strict(text, source, "safetensors header");
  MINIGPT_CHECK(header.is_object(), "{}: safetensors header must be a JSON object", source);

  SafetensorsIndex index;
  index.data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - index.data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      MINIGPT_CHECK(value.is_object(), "{}: __metadata__ must be an object of string -> string", source);
      for (const auto& [mk, mv] : value.items()) {
        MINIGPT_CHECK(mv.is_string(), "{}: __metadata__ value of '{}' must be a string", source, mk);
        index.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    index.entries.push_back(parse_entry(key, value, source, data_size));
  }

  // Sorted by offset, the byte ranges must tile [0, data_size) exactly.
  std::sort(index.entries.begin(), index.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const auto& e : index.entries) {
    MINIGPT_CHECK(e.begin >= expect, "{}: tensor '{}': data_offsets [{}, {}] overlap the previous tensor (ends at {})", source,
                  e.name, e.begin, e.end, expect);
    MINIGPT_CHECK(e.begin == expect, "{}: tensor '{}': gap in the data region: bytes [{}, {}) belong to no tensor", source,
                  e.name, expect, e.begin);
    expect = e.end;
  }
  MINIGPT_CHECK(expect == data_size, "{}: data region has {} bytes but the tensors cover {} (trailing bytes or truncation)",
                source, data_size, expect);
  for (auto& e : index.entries) {  // offsets relative to the whole file from here on
    e.begin += index.data_start;
    e.end += index.data_start;
  }
  return index;
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.path = path;
  f.bytes = read_file_bytes(path);
  f.index = parse_safetensors(f.bytes, path);
  return f;
}

Tensor SafetensorsFile::tensor_f32(const std::string& name) const {
  const SafetensorsEntry* e = index.find(name);
  MINIGPT_CHECK(e != nullptr, "{}: missing tensor '{}'", path, name);
  MINIGPT_CHECK(e->dtype == DType::F32, "{}: tensor '{}' has dtype {}, expected F32", path, name, dtype_name(e->dtype));
  Tensor t = Tensor::empty(e->shape);
  const auto src = data(*e);
  if (!src.empty()) std::memcpy(t.data(), src.data(), src.size());  // little-endian host
  return t;
}

SafetensorsItem f32_item(const std::string& name, const Tensor& tensor) {
  MINIGPT_CHECK(tensor.defined() && tensor.device() == Device::CPU && tensor.is_contiguous(),
                "safetensors: tensor '{}' must be a defined, contiguous CPU tensor", name);
  const float* p = tensor.data();
  return {name, DType::F32, tensor.shape(),
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p), tensor.nbytes())};
}

std::vector<uint8_t> encode_safetensors(const std::vector<SafetensorsItem>& items,
                                        const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps insertion order: __metadata__ first, then tensors in data
  // order, as the reference writer lays them out.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& item : items) {
    MINIGPT_CHECK(!item.name.empty() && item.name != "__metadata__", "safetensors write: invalid tensor name '{}'", item.name);
    MINIGPT_CHECK(seen.insert(item.name).second, "safetensors write: duplicate tensor name '{}'", item.name);
    const uint64_t size = byte_size(item.shape, item.dtype, "safetensors write", item.name);
    MINIGPT_CHECK(size == item.data.size(), "safetensors write: tensor '{}' has {} bytes, shape {} of {} needs {}", item.name,
                  item.data.size(), shape_str(item.shape), dtype_name(item.dtype), size);
    header[item.name] = {{"dtype", dtype_name(item.dtype)}, {"shape", item.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text;
  try {
    text = header.dump();  // compact, as the reference
  } catch (const nlohmann::json::exception& e) {
    MINIGPT_FAIL("safetensors write: cannot encode the header (metadata must be UTF-8): {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data region starts 8-byte aligned

  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  put_u64_le(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& item : items) out.insert(out.end(), item.data.begin(), item.data.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(items, metadata));
}

}  // namespace minigpt::io
