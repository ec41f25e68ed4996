#include "io/npy.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_bytes.h"

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

namespace minigpt::io {

// Tensor bytes are copied as they are: the formats are little-endian, and so is every host we
// build for.
static_assert(std::endian::native == std::endian::little, "io/ assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct Descr {
  const char* text;
  DType dtype;
};
// Accepted descr strings. One-byte types have no byte order; numpy writes '|' but '<' is legal.
constexpr Descr kDescrs[] = {{"<f4", DType::F32}, {"<f8", DType::F64}, {"<i4", DType::I32}, {"<i8", DType::I64},
                             {"|u1", DType::U8},  {"<u1", DType::U8},  {"|i1", DType::I8},  {"<i1", DType::I8}};

const char* descr_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return "<f4";
    case DType::F64: return "<f8";
    case DType::I32: return "<i4";
    case DType::I64: return "<i8";
    case DType::U8: return "|u1";
    case DType::I8: return "|i1";
    default: MINIGPT_FAIL("npy write: dtype {} is not supported", dtype_name(dtype));
  }
}

// Strict parser for the header dict: a tiny subset of Python literals.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  void parse(NpyArray& out) {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<Shape> shape;
    skip_ws();
    expect('{');
    skip_ws();
    while (!peek('}')) {
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        MINIGPT_CHECK(!descr, "{}: npy header: duplicate key 'descr'", source_);
        MINIGPT_CHECK(peek('\'') || peek('"'), "{}: npy header: descr must be a string (structured dtypes are not supported)",
                      source_);
        descr = string_literal();
      } else if (key == "fortran_order") {
        MINIGPT_CHECK(!fortran, "{}: npy header: duplicate key 'fortran_order'", source_);
        fortran = boolean();
      } else if (key == "shape") {
        MINIGPT_CHECK(!shape, "{}: npy header: duplicate key 'shape'", source_);
        shape = tuple();
      } else {
        MINIGPT_FAIL("{}: npy header: unexpected key '{}'", source_, key);
      }
      skip_ws();
      if (peek(',')) {
        ++pos_;
        skip_ws();
      } else {
        MINIGPT_CHECK(peek('}'), "{}: npy header: expected ',' or '}}' at byte {}", source_, pos_);
      }
    }
    ++pos_;  // '}'
    while (pos_ < s_.size()) {
      MINIGPT_CHECK(s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r',
                    "{}: npy header: unexpected text after the dict at byte {}", source_, pos_);
      ++pos_;
    }
    MINIGPT_CHECK(descr, "{}: npy header: missing key 'descr'", source_);
    MINIGPT_CHECK(fortran, "{}: npy header: missing key 'fortran_order'", source_);
    MINIGPT_CHECK(shape, "{}: npy header: missing key 'shape'", source_);
    MINIGPT_CHECK(!*fortran, "{}: npy: fortran_order=True arrays are not supported (save with C order)", source_);

    std::optional<DType> dtype;
    for (const auto& d : kDescrs)
      if (*descr == d.text) dtype = d.dtype;
    if (!dtype) {
      const bool object = descr->find('O') != std::string::npos;
      MINIGPT_CHECK(!object, "{}: npy: object dtype '{}' is not supported (it would need pickle)", source_, *descr);
      const bool big = !descr->empty() && (*descr)[0] == '>';
      MINIGPT_CHECK(!big, "{}: npy: big-endian dtype '{}' is not supported", source_, *descr);
      MINIGPT_FAIL("{}: npy: unsupported dtype '{}' (supported: <f4 <f8 <i4 <i8 |u1 |i1)", source_, *descr);
    }
    out.dtype = *dtype;
    out.shape = *shape;
  }

 private:
  bool peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    MINIGPT_CHECK(peek(c), "{}: npy header: expected '{}' at byte {}", source_, c, pos_);
    ++pos_;
  }
  std::string string_literal() {
    MINIGPT_CHECK(peek('\'') || peek('"'), "{}: npy header: expected a quoted string at byte {}", source_, pos_);
    const char quote = s_[pos_++];
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      MINIGPT_CHECK(s_[pos_] != '\\', "{}: npy header: escapes in strings are not supported", source_);
      ++pos_;
    }
    MINIGPT_CHECK(pos_ < s_.size(), "{}: npy header: unterminated string", source_);
    return std::string(s_.substr(start, pos_++ - start));
  }
  bool boolean() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    MINIGPT_FAIL("{}: npy header: fortran_order must be True or False", source_);
  }
  int64_t integer() {
    MINIGPT_CHECK(pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9',
                  "{}: npy header: shape must hold non-negative integers (byte {})", source_, pos_);
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int digit = s_[pos_++] - '0';
      MINIGPT_CHECK(v <= (std::numeric_limits<int64_t>::max() - digit) / 10, "{}: npy header: shape dimension overflows",
                    source_);
      v = v * 10 + digit;
    }
    return v;
  }
  // "()", "(5,)", "(2, 3)", "(2, 3,)"
  Shape tuple() {
    expect('(');
    Shape shape;
    skip_ws();
    while (!peek(')')) {
      shape.push_back(integer());
      MINIGPT_CHECK(shape.size() <= kNpyMaxRank, "{}: npy header: shape has more than {} dimensions", source_, kNpyMaxRank);
      skip_ws();
      if (peek(',')) {
        ++pos_;
        skip_ws();
      } else {
        MINIGPT_CHECK(peek(')'), "{}: npy header: expected ',' or ')' in shape at byte {}", source_, pos_);
      }
    }
    ++pos_;
    return shape;
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& source) {
  MINIGPT_CHECK(bytes.size() >= kMagicLen + 2 && std::memcmp(bytes.data(), kMagic, kMagicLen) == 0,
                "{}: not a .npy file (bad magic)", source);
  const uint8_t major = bytes[6], minor = bytes[7];
  MINIGPT_CHECK((major >= 1 && major <= 3) && minor == 0, "{}: unsupported .npy version {}.{}", source, major, minor);
  const size_t len_bytes = major == 1 ? 2 : 4;
  MINIGPT_CHECK(bytes.size() >= 8 + len_bytes, "{}: truncated .npy file: no header length", source);
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= static_cast<uint64_t>(bytes[8 + i]) << (8 * i);
  const uint64_t header_start = 8 + len_bytes;
  MINIGPT_CHECK(header_len <= kNpyMaxHeader, "{}: npy header length {} exceeds the {} byte limit", source, header_len,
                kNpyMaxHeader);
  MINIGPT_CHECK(header_len <= bytes.size() - header_start, "{}: npy header length {} runs past the end of the file ({} bytes)",
                source, header_len, bytes.size());

  NpyArray out;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + header_start), static_cast<size_t>(header_len));
  HeaderParser(text, source).parse(out);

  // numel x item size, overflow checked; the data must be exactly that long.
  const auto size = checked_byte_size(out.shape, out.dtype);
  MINIGPT_CHECK(size.has_value(), "{}: npy shape {} of {} overflows the byte size", source, shape_str(out.shape),
                dtype_name(out.dtype));
  const uint64_t need = *size;
  out.data_begin = header_start + header_len;
  const uint64_t have = bytes.size() - out.data_begin;
  MINIGPT_CHECK(have >= need, "{}: npy data too short: shape {} of {} needs {} bytes, the file has {}", source,
                shape_str(out.shape), dtype_name(out.dtype), need, have);
  MINIGPT_CHECK(have == need, "{}: npy data too long: shape {} of {} needs {} bytes, the file has {}", source,
                shape_str(out.shape), dtype_name(out.dtype), need, have);
  out.data_end = out.data_begin + need;
  return out;
}

std::vector<uint8_t> encode_npy(DType dtype, const Shape& shape, std::span<const uint8_t> data) {
  const auto size = checked_byte_size(shape, dtype);
  MINIGPT_CHECK(size.has_value() && *size == data.size(), "npy write: {} bytes given for shape {} of {}", data.size(),
                shape_str(shape), dtype_name(dtype));
  std::string header = "{'descr': '" + std::string(descr_of(dtype)) + "', 'fortran_order': False, 'shape': " +
                       shape_tuple(shape) + ", }";
  // Version 1.0 while the header fits a u16; pad so the data starts 64-byte aligned, as numpy.
  const bool v1 = header.size() + 1 + 10 <= 65535;
  const size_t prefix = v1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out(kMagic, kMagic + kMagicLen);
  out.push_back(v1 ? 1 : 2);
  out.push_back(0);
  for (size_t i = 0; i < (v1 ? 2u : 4u); ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Tensor npy_to_tensor_f32(std::span<const uint8_t> bytes, const std::string& source) {
  const NpyArray a = parse_npy(bytes, source);
  MINIGPT_CHECK(a.dtype == DType::F32, "{}: npy dtype is {}, expected float32 ('<f4')", source, dtype_name(a.dtype));
  Tensor t = Tensor::empty(a.shape);
  if (a.data_end > a.data_begin) std::memcpy(t.data(), bytes.data() + a.data_begin, a.data_end - a.data_begin);
  return t;
}

TokenIds npy_to_token_ids(std::span<const uint8_t> bytes, const std::string& source) {
  const NpyArray a = parse_npy(bytes, source);
  MINIGPT_CHECK(a.dtype == DType::I32 || a.dtype == DType::I64, "{}: token ids must be int32 or int64, got {}", source,
                dtype_name(a.dtype));
  TokenIds out;
  out.shape = a.shape;
  const uint64_t n = (a.data_end - a.data_begin) / dtype_size(a.dtype);
  out.ids.resize(static_cast<size_t>(n));
  const uint8_t* p = bytes.data() + a.data_begin;
  for (uint64_t i = 0; i < n; ++i) {
    int64_t v;
    if (a.dtype == DType::I32) {
      int32_t v32;
      std::memcpy(&v32, p + 4 * i, 4);
      v = v32;
    } else {
      std::memcpy(&v, p + 8 * i, 8);
    }
    MINIGPT_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), "{}: token id {} at flat index {} is out of range",
                  source, v, i);
    out.ids[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  return out;
}

std::vector<uint8_t> npy_to_u8(std::span<const uint8_t> bytes, const std::string& source, Shape* shape) {
  const NpyArray a = parse_npy(bytes, source);
  MINIGPT_CHECK(a.dtype == DType::U8, "{}: npy dtype is {}, expected uint8", source, dtype_name(a.dtype));
  if (shape) *shape = a.shape;
  return std::vector<uint8_t>(bytes.begin() + static_cast<ptrdiff_t>(a.data_begin),
                              bytes.begin() + static_cast<ptrdiff_t>(a.data_end));
}

Tensor read_npy_f32(const std::string& path) { return npy_to_tensor_f32(read_file_bytes(path), path); }
TokenIds read_npy_token_ids(const std::string& path) { return npy_to_token_ids(read_file_bytes(path), path); }

std::vector<uint8_t> encode_npy_f32(const Tensor& tensor) {
  MINIGPT_CHECK(tensor.defined() && tensor.device() == Device::CPU, "npy write: tensor must be a defined CPU tensor");
  const Tensor c = tensor.is_contiguous() ? tensor : tensor.clone();
  const float* p = c.data();
  return encode_npy(DType::F32, c.shape(), std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p), c.nbytes()));
}

std::vector<uint8_t> encode_npy_u8(std::span<const uint8_t> values) {
  return encode_npy(DType::U8, {static_cast<int64_t>(values.size())}, values);
}

void write_npy_f32(const std::string& path, const Tensor& tensor) { write_file_atomic(path, encode_npy_f32(tensor)); }

}  // namespace minigpt::io
