// io/: atomic writes, safetensors, .npy and .npz. Valid files round-trip bit-exactly (and with
// the Python safetensors/numpy packages when python3 has them); every malformed file throws
// minigpt::Error naming the problem.
#include "io/atomic_file.h"
#include "io/npy.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "io_test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>

using namespace minigpt;
using namespace minigpt::io;
using minigpt::testing::ScratchDir;
using minigpt::testing::slurp;
using minigpt::testing::spit;

namespace {

std::vector<uint8_t> as_bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// A safetensors file from a header text and a data region (no padding: tests control bytes).
std::vector<uint8_t> st_file(const std::string& header, size_t data_bytes, uint64_t declared_len = UINT64_MAX) {
  const uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

std::string st_parse_error(const std::string& header, size_t data_bytes) {
  const auto bytes = st_file(header, data_bytes);
  return minigpt::testing::error_of([&] { parse_safetensors(bytes, "t.safetensors"); });
}

#define EXPECT_ST_ERROR(header, data_bytes, substr)                                          \
  do {                                                                                       \
    const std::string _m = st_parse_error(header, data_bytes);                               \
    EXPECT_NE(_m.find(substr), std::string::npos) << "expected '" << (substr) << "' in: " << _m; \
    EXPECT_NE(_m.find("t.safetensors"), std::string::npos) << _m;                            \
  } while (0)

Tensor iota_tensor(const Shape& shape, float scale = 0.5f) {
  Tensor t = Tensor::empty(shape);
  float v = -3.0f;
  for (float& x : t.span()) x = (v += scale);
  return t;
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool have_python_module(const char* module) {
  const std::string cmd = std::string("python3 -c 'import ") + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Atomic file

TEST(AtomicFile, WritesAndReplaces) {
  ScratchDir dir;
  const std::string path = dir.file("a.bin");
  write_file_atomic(path, std::string_view("first"));
  EXPECT_EQ(slurp(path), as_bytes("first"));
  ::chmod(path.c_str(), 0640);
  write_file_atomic(path, std::string_view("second, longer"));
  EXPECT_EQ(slurp(path), as_bytes("second, longer"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);  // the replaced file's mode is kept
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no temporaries left
}

TEST(AtomicFile, UncommittedWriterLeavesOldFileAndNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("a.bin");
  write_file_atomic(path, std::string_view("old"));
  std::string temp;
  {
    AtomicFileWriter w(path);
    temp = w.temp_path();
    w.write(std::string_view("partial new contents"));
    EXPECT_TRUE(std::filesystem::exists(temp));
  }  // destroyed without commit, as when an exception unwinds a save
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_EQ(slurp(path), as_bytes("old"));
}

TEST(AtomicFile, FailuresThrowAndLeaveNothing) {
  ScratchDir dir;
  EXPECT_ERROR_CONTAINS(write_file_atomic(dir.file("missing/x.bin"), std::string_view("x")), "cannot create a temporary");
  // Renaming over a folder fails after the data was written: the temporary must go.
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_directory(dir.file("sub/inner"));
  EXPECT_ERROR_CONTAINS(write_file_atomic(dir.file("sub"), std::string_view("x")), "cannot rename");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  AtomicFileWriter w(dir.file("c.bin"));
  w.commit();
  EXPECT_ERROR_CONTAINS(w.write(std::string_view("late")), "after commit");
}

// ---------------------------------------------------------------------------------------------
// safetensors: valid files

TEST(Safetensors, EncodeParseRoundTrip) {
  const Tensor a = iota_tensor({2, 3}), b = iota_tensor({5}), empty = Tensor::empty({0, 4});
  const std::vector<uint8_t> ids = {1, 2, 3};
  const auto bytes = encode_safetensors(
      {f32_item("a", a), f32_item("b", b), f32_item("empty", empty), {"u", DType::U8, {3}, ids}}, {{"k", "v"}});
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);  // data region 8-byte aligned, as the reference writer
  const auto index = parse_safetensors(bytes, "mem");
  ASSERT_EQ(index.entries.size(), 4u);
  EXPECT_EQ(index.metadata.at("k"), "v");
  const auto* ea = index.find("a");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->shape, (Shape{2, 3}));
  EXPECT_EQ(ea->dtype, DType::F32);
  EXPECT_EQ(std::memcmp(bytes.data() + ea->begin, a.data(), a.nbytes()), 0);
  EXPECT_EQ(index.find("empty")->begin, index.find("empty")->end);
  EXPECT_EQ(index.find("u")->dtype, DType::U8);
}

TEST(Safetensors, FileRoundTripAndTensorF32) {
  ScratchDir dir;
  const Tensor a = iota_tensor({3, 4});
  write_safetensors(dir.file("x.safetensors"), {f32_item("w", a)}, {});
  const auto file = read_safetensors(dir.file("x.safetensors"));
  EXPECT_TRUE(bits_equal(file.tensor_f32("w"), a));
  EXPECT_ERROR_CONTAINS(file.tensor_f32("nope"), "missing tensor 'nope'");
  EXPECT_ERROR_CONTAINS(read_safetensors(dir.file("absent.safetensors")), "absent.safetensors: cannot open");
}

TEST(Safetensors, AcceptsHeaderWithoutMetadataAndTrailingSpaces) {
  const auto bytes = st_file(R"({"x":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}   )", 16);
  const auto index = parse_safetensors(bytes, "t");
  EXPECT_EQ(index.entries.at(0).dtype, DType::I64);
  EXPECT_TRUE(index.metadata.empty());
}

TEST(Safetensors, WriterRejectsBadItems) {
  const Tensor a = iota_tensor({2});
  EXPECT_ERROR_CONTAINS(encode_safetensors({f32_item("a", a), f32_item("a", a)}, {}), "duplicate tensor name 'a'");
  EXPECT_ERROR_CONTAINS(encode_safetensors({f32_item("", a)}, {}), "invalid tensor name");
  const std::vector<uint8_t> three(3);
  EXPECT_ERROR_CONTAINS(encode_safetensors({{"x", DType::F32, {1}, three}}, {}), "has 3 bytes");
}

// ---------------------------------------------------------------------------------------------
// safetensors: malformed files (each must be an Error naming the file and the problem)

TEST(SafetensorsMalformed, TruncatedAndHeaderLength) {
  const std::vector<uint8_t> tiny = {1, 2, 3};
  EXPECT_ERROR_CONTAINS(parse_safetensors(tiny, "t.safetensors"), "t.safetensors: truncated");
  const auto past = st_file("{}", 0, 100);
  EXPECT_ERROR_CONTAINS(parse_safetensors(past, "t.safetensors"), "runs past the end of the file");
  const auto huge = st_file("{}", 0, uint64_t{1} << 40);
  EXPECT_ERROR_CONTAINS(parse_safetensors(huge, "t.safetensors"), "exceeds the");
  const auto max = st_file("{}", 0, UINT64_MAX - 1);
  EXPECT_ERROR_CONTAINS(parse_safetensors(max, "t.safetensors"), "exceeds the");
  // A valid file cut short in its data region.
  auto good = st_file(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
  good.resize(good.size() - 5);
  EXPECT_ERROR_CONTAINS(parse_safetensors(good, "t.safetensors"), "out of range");
}

TEST(SafetensorsMalformed, BadJson) {
  EXPECT_ST_ERROR(R"({"x": )", 0, "invalid JSON");
  EXPECT_ST_ERROR("[1, 2]", 0, "must be a JSON object");
  EXPECT_ST_ERROR(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} trailing)", 4, "invalid JSON");
  EXPECT_ST_ERROR(std::string(200, '[') + std::string(200, ']'), 0, "nested deeper");
  EXPECT_ST_ERROR("{\"\xff\": 1}", 0, "invalid JSON");  // invalid UTF-8
}

TEST(SafetensorsMalformed, Offsets) {
  // Overlap: b starts inside a.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12, "overlap");
  // Gap: bytes [8, 12) unused.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                  16, "gap in the data region");
  // Gap at the start.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "gap in the data region");
  // Out of range: end past the data region.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12, "out of range");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})", 4,
                  "out of range");
  // Trailing bytes after the last tensor.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "trailing bytes");
  // begin > end, negative offsets, wrong arity, non-integers.
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "begin 4 > end 0");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4, "must be non-negative");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "must be [begin, end]");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4, "must hold integers");
}

TEST(SafetensorsMalformed, SizesShapesDtypes) {
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "hold 8 bytes but shape (3) of F32 needs 12");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflows");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0, "overflows the byte size");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, "must be non-negative");
  // Zero elements, but the other dimensions overflow: the strides of such a tensor could not
  // be represented (found by fuzz_npy).
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflows");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", 16, "non-array shape");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4, "unknown dtype 'F33'");
  EXPECT_ST_ERROR(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, "non-string dtype");
  EXPECT_ST_ERROR(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "missing or non-string dtype");
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4, "unknown field 'extra'");
  EXPECT_ST_ERROR(R"({"a":[1,2]})", 0, "entry must be a JSON object");
}

TEST(SafetensorsMalformed, NamesAndMetadata) {
  EXPECT_ST_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  8, "duplicate key 'a'");
  EXPECT_ST_ERROR(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, "empty name");
  EXPECT_ST_ERROR(R"({"__metadata__":{"k":1}})", 0, "__metadata__ value of 'k' must be a string");
  EXPECT_ST_ERROR(R"({"__metadata__":["k"]})", 0, "__metadata__ must be an object");
  EXPECT_ST_ERROR(R"({"__metadata__":{"k":"a","k":"b"}})", 0, "duplicate key 'k'");
}

// ---------------------------------------------------------------------------------------------
// safetensors with the Python package: both directions, bit-exact

TEST(Safetensors, PythonPackageReadsOursAndWeReadTheirs) {
  if (!have_python_module("safetensors.numpy")) GTEST_SKIP() << "python3 with safetensors and numpy not available";
  ScratchDir dir;
  const Tensor a = iota_tensor({3, 5}, 0.37f), b = iota_tensor({7}, -1.1f);
  write_safetensors(dir.file("ours.safetensors"), {f32_item("a", a), f32_item("b.bias", b)}, {{"note", "hi"}});
  const std::string script =
      "import numpy as np, sys\n"
      "from safetensors.numpy import load_file, save_file\n"
      "from safetensors import safe_open\n"
      "d = sys.argv[1]\n"
      "t = load_file(d + '/ours.safetensors')\n"
      "with safe_open(d + '/ours.safetensors', 'np') as f: assert f.metadata() == {'note': 'hi'}, f.metadata()\n"
      "a = (np.arange(15, dtype=np.float32).reshape(3, 5) + 1) * np.float32(0.37) - np.float32(3)\n"
      "assert t['a'].shape == (3, 5) and t['b.bias'].shape == (7,)\n"
      "save_file({'a': t['a'], 'b.bias': t['b.bias'], 'i': np.arange(6, dtype=np.int64).reshape(2, 3)}, d + "
      "'/theirs.safetensors', metadata={'note': 'back'})\n";
  spit(dir.file("s.py"), as_bytes(script));
  ASSERT_EQ(std::system(("python3 " + dir.file("s.py") + " " + dir.path()).c_str()), 0);
  const auto theirs = read_safetensors(dir.file("theirs.safetensors"));
  EXPECT_TRUE(bits_equal(theirs.tensor_f32("a"), a));
  EXPECT_TRUE(bits_equal(theirs.tensor_f32("b.bias"), b));
  EXPECT_EQ(theirs.index.find("i")->dtype, DType::I64);
  EXPECT_EQ(theirs.index.metadata.at("note"), "back");
}

// ---------------------------------------------------------------------------------------------
// .npy

namespace {
std::vector<uint8_t> npy_with_header(const std::string& dict, size_t data_bytes, uint8_t major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  const size_t len = dict.size();
  out.push_back(static_cast<uint8_t>(len));
  out.push_back(static_cast<uint8_t>(len >> 8));
  if (major >= 2) {
    out.push_back(static_cast<uint8_t>(len >> 16));
    out.push_back(static_cast<uint8_t>(len >> 24));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}
}  // namespace

TEST(Npy, RoundTripF32AndFile) {
  ScratchDir dir;
  const Tensor a = iota_tensor({2, 3, 4});
  const auto bytes = encode_npy_f32(a);
  EXPECT_EQ((bytes.size() - a.nbytes()) % 64, 0u);  // data 64-byte aligned, as numpy writes
  EXPECT_TRUE(bits_equal(npy_to_tensor_f32(bytes, "m"), a));
  write_npy_f32(dir.file("a.npy"), a);
  EXPECT_TRUE(bits_equal(read_npy_f32(dir.file("a.npy")), a));
  const Tensor scalar = Tensor::full({}, 2.5f);
  EXPECT_TRUE(bits_equal(npy_to_tensor_f32(encode_npy_f32(scalar), "m"), scalar));
  const Tensor strided = a.narrow0(1, 2);  // a contiguous view; non-contiguous goes through clone()
  EXPECT_TRUE(bits_equal(npy_to_tensor_f32(encode_npy_f32(strided), "m"), strided.clone()));
}

TEST(Npy, TokenIdsAndU8) {
  const std::vector<int64_t> ids64 = {3, 17, 42, 0, 5, 6};
  const auto b64 = encode_npy(DType::I64, {2, 3}, {reinterpret_cast<const uint8_t*>(ids64.data()), 48});
  const TokenIds t = npy_to_token_ids(b64, "ids.npy");
  EXPECT_EQ(t.shape, (Shape{2, 3}));
  EXPECT_EQ(t.ids, (std::vector<int32_t>{3, 17, 42, 0, 5, 6}));
  const std::vector<int32_t> ids32 = {1, 2};
  const auto b32 = encode_npy(DType::I32, {2}, {reinterpret_cast<const uint8_t*>(ids32.data()), 8});
  EXPECT_EQ(npy_to_token_ids(b32, "m").ids, ids32);
  const std::vector<int64_t> bad = {1, -2};
  const auto bbad = encode_npy(DType::I64, {2}, {reinterpret_cast<const uint8_t*>(bad.data()), 16});
  EXPECT_ERROR_CONTAINS(npy_to_token_ids(bbad, "ids.npy"), "token id -2 at flat index 1 is out of range");
  const std::vector<int64_t> big = {int64_t{1} << 40};
  const auto bbig = encode_npy(DType::I64, {1}, {reinterpret_cast<const uint8_t*>(big.data()), 8});
  EXPECT_ERROR_CONTAINS(npy_to_token_ids(bbig, "ids.npy"), "out of range");
  EXPECT_ERROR_CONTAINS(npy_to_token_ids(encode_npy_f32(iota_tensor({2})), "ids.npy"), "must be int32 or int64");
  const std::vector<uint8_t> u = {7, 8, 9};
  Shape shape;
  EXPECT_EQ(npy_to_u8(encode_npy_u8(u), "m", &shape), u);
  EXPECT_EQ(shape, (Shape{3}));
  EXPECT_ERROR_CONTAINS(npy_to_tensor_f32(encode_npy_u8(u), "m"), "expected float32");
}

TEST(Npy, AcceptsNumpyVariants) {
  // Double quotes, no trailing comma, keys in another order, version 2 and 3, '<u1'.
  const auto a = npy_with_header(R"({"shape": (2,), "fortran_order": False, "descr": "<f4"})" "\n", 8);
  EXPECT_EQ(parse_npy(a, "m").shape, (Shape{2}));
  const auto b = npy_with_header("{'descr': '<u1', 'fortran_order': False, 'shape': (1, 2, ), }\n", 2, 3);
  EXPECT_EQ(parse_npy(b, "m").dtype, DType::U8);
  const auto c = npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", 8, 2);
  EXPECT_EQ(parse_npy(c, "m").shape, Shape{});
}

TEST(NpyMalformed, Rejected) {
  auto err = [](const std::vector<uint8_t>& b) { return minigpt::testing::error_of([&] { parse_npy(b, "x.npy"); }); };
  auto expect = [&](const std::vector<uint8_t>& b, const std::string& sub) {
    const std::string m = err(b);
    EXPECT_NE(m.find(sub), std::string::npos) << "expected '" << sub << "' in: " << m;
    EXPECT_NE(m.find("x.npy"), std::string::npos) << m;
  };
  expect(npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", 16), "object dtype '|O'");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n", 16), "fortran_order=True");
  expect(npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8), "big-endian");
  expect(npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", 16), "unsupported dtype '<c8'");
  expect(npy_with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", 8), "structured");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 4), "data too short");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 12), "data too long");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False}\n", 0), "missing key 'shape'");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}\n", 4), "unexpected key 'x'");
  expect(npy_with_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4), "duplicate key");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n", 0), "non-negative integers");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", 0), "overflows");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", 0), "overflows");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }\n", 0),
         "overflows");  // found by fuzz_npy: an empty array whose strides overflow
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}\n", 4), "True or False");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x\n", 4), "unexpected text after");
  expect(npy_with_header("{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}\n", 4), "npy header");
  expect(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)\n", 4), "expected ',' or '}'");
  expect(npy_with_header("", 0, 4), "unsupported .npy version 4.0");
  expect(as_bytes("NUMPY"), "bad magic");
  auto past = npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", 0);
  past[8] = 0xff;
  expect(past, "runs past the end");
  expect(std::vector<uint8_t>{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 1}, "no header length");
}

TEST(Npy, NumpyReadsOurs) {
  if (!have_python_module("numpy")) GTEST_SKIP() << "python3 with numpy not available";
  ScratchDir dir;
  write_npy_f32(dir.file("a.npy"), iota_tensor({2, 3}, 0.25f));
  const std::string cmd = "python3 -c \"import numpy as np; a = np.load('" + dir.file("a.npy") +
                          "', allow_pickle=False); assert a.dtype == np.float32 and a.shape == (2, 3); "
                          "assert a[1, 2] == np.float32(-3 + 6 * 0.25), a\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

// ---------------------------------------------------------------------------------------------
// .npz

namespace {
std::vector<NpzMember> sample_members() {
  return {{"a.npy", encode_npy_f32(iota_tensor({4, 4}))}, {"meta.npy", encode_npy_u8(as_bytes("{\"x\": 1}"))}};
}

// Offsets in the archive that encode_npz writes (one STORED zip, no extras).
uint64_t eocd_offset(const std::vector<uint8_t>& z) { return z.size() - 22; }
uint32_t u32_at(const std::vector<uint8_t>& z, uint64_t p) {
  return z[p] | (z[p + 1] << 8) | (z[p + 2] << 16) | (static_cast<uint32_t>(z[p + 3]) << 24);
}
uint64_t cd_offset(const std::vector<uint8_t>& z) { return u32_at(z, eocd_offset(z) + 16); }

// Raw deflate of `data` (what zip method 8 stores).
std::vector<uint8_t> raw_deflate(const std::vector<uint8_t>& data) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&zs, data.size()));
  zs.next_in = const_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A one-member DEFLATED zip, built by hand (with a declared size that tests may falsify).
std::vector<uint8_t> deflated_zip(const std::string& name, const std::vector<uint8_t>& data, uint32_t declared_size) {
  const auto packed = raw_deflate(data);
  const uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
  std::vector<uint8_t> z;
  auto p16 = [&](uint16_t v) { z.push_back(v & 0xff); z.push_back(v >> 8); };
  auto p32 = [&](uint32_t v) { p16(v & 0xffff); p16(v >> 16); };
  p32(0x04034b50); p16(20); p16(0); p16(8); p16(0); p16(0); p32(crc);
  p32(static_cast<uint32_t>(packed.size())); p32(declared_size); p16(static_cast<uint16_t>(name.size())); p16(0);
  z.insert(z.end(), name.begin(), name.end());
  z.insert(z.end(), packed.begin(), packed.end());
  const auto cd = static_cast<uint32_t>(z.size());
  p32(0x02014b50); p16(20); p16(20); p16(0); p16(8); p16(0); p16(0); p32(crc);
  p32(static_cast<uint32_t>(packed.size())); p32(declared_size); p16(static_cast<uint16_t>(name.size()));
  p16(0); p16(0); p16(0); p16(0); p32(0); p32(0);
  z.insert(z.end(), name.begin(), name.end());
  const auto cd_size = static_cast<uint32_t>(z.size() - cd);
  p32(0x06054b50); p16(0); p16(0); p16(1); p16(1); p32(cd_size); p32(cd); p16(0);
  return z;
}

// A one-member STORED zip written entirely in zip64 form: sizes and offset 0xFFFFFFFF in the
// central directory with the real values in a zip64 extra field, and a zip64 end record plus
// locator (what Python's zipfile writes for members and archives past 4 GiB).
std::vector<uint8_t> zip64_zip(const std::string& name, const std::vector<uint8_t>& data, uint16_t extra_len = 28) {
  const uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
  std::vector<uint8_t> z;
  auto p16 = [&](uint16_t v) { z.push_back(v & 0xff); z.push_back(v >> 8); };
  auto p32 = [&](uint32_t v) { p16(v & 0xffff); p16(v >> 16); };
  auto p64 = [&](uint64_t v) { p32(static_cast<uint32_t>(v)); p32(static_cast<uint32_t>(v >> 32)); };
  const auto n = static_cast<uint16_t>(name.size());
  p32(0x04034b50); p16(45); p16(0); p16(0); p16(0); p16(0); p32(crc); p32(0xFFFFFFFF); p32(0xFFFFFFFF); p16(n); p16(20);
  z.insert(z.end(), name.begin(), name.end());
  p16(1); p16(16); p64(data.size()); p64(data.size());
  z.insert(z.end(), data.begin(), data.end());
  const uint64_t cd = z.size();
  p32(0x02014b50); p16(45); p16(45); p16(0); p16(0); p16(0); p16(0); p32(crc); p32(0xFFFFFFFF); p32(0xFFFFFFFF);
  p16(n); p16(extra_len); p16(0); p16(0); p16(0); p32(0); p32(0xFFFFFFFF);
  z.insert(z.end(), name.begin(), name.end());
  p16(1); p16(static_cast<uint16_t>(extra_len - 4)); p64(data.size()); p64(data.size()); p64(0);
  z.resize(cd + 46 + n + extra_len);
  const uint64_t cd_size = z.size() - cd, z64 = z.size();
  p32(0x06064b50); p64(44); p16(45); p16(45); p32(0); p32(0); p64(1); p64(1); p64(cd_size); p64(cd);
  p32(0x07064b50); p32(0); p64(z64); p32(1);
  p32(0x06054b50); p16(0); p16(0); p16(0xFFFF); p16(0xFFFF); p32(0xFFFFFFFF); p32(0xFFFFFFFF); p16(0);
  return z;
}
}  // namespace

TEST(Npz, Zip64Records) {
  const auto data = encode_npy_f32(iota_tensor({3}));
  const auto back = parse_npz(zip64_zip("z.npy", data), "z.npz");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].name, "z.npy");
  EXPECT_EQ(back[0].bytes, data);
  EXPECT_ERROR_CONTAINS(parse_npz(zip64_zip("z.npy", data, 20), "z.npz"), "zip64 extra field too short");
  auto no_locator = zip64_zip("z.npy", data);
  no_locator[no_locator.size() - 22 - 20] = 'X';
  EXPECT_ERROR_CONTAINS(parse_npz(no_locator, "z.npz"), "zip64 end-of-central-directory locator missing");
}

TEST(Npz, StoredRoundTrip) {
  ScratchDir dir;
  const auto members = sample_members();
  write_npz(dir.file("x.npz"), members);
  const auto back = read_npz(dir.file("x.npz"));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "a.npy");
  EXPECT_EQ(back[0].bytes, members[0].bytes);
  EXPECT_EQ(back[1].bytes, members[1].bytes);
  EXPECT_TRUE(parse_npz(encode_npz({}), "empty.npz").empty());
  EXPECT_ERROR_CONTAINS(encode_npz({members[0], members[0]}), "duplicate member 'a.npy'");
}

TEST(Npz, DeflatedMember) {
  const auto data = encode_npy_f32(iota_tensor({64}));
  const auto z = deflated_zip("d.npy", data, static_cast<uint32_t>(data.size()));
  const auto back = parse_npz(z, "d.npz");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].bytes, data);
  const auto more = deflated_zip("d.npy", data, static_cast<uint32_t>(data.size() - 1));
  EXPECT_ERROR_CONTAINS(parse_npz(more, "d.npz"), "inflates to more than the declared");
  const auto less = deflated_zip("d.npy", data, static_cast<uint32_t>(data.size() + 1));
  EXPECT_ERROR_CONTAINS(parse_npz(less, "d.npz"), "d.npz: zip: member 'd.npy'");
  const auto bomb = deflated_zip("d.npy", data, 0xFFFFFFF0u);
  EXPECT_ERROR_CONTAINS(parse_npz(bomb, "d.npz"), "beyond deflate's ratio");
  auto corrupt = z;
  corrupt[30 + 5 + 2] ^= 0xff;  // inside the deflate stream
  EXPECT_ERROR_CONTAINS(parse_npz(corrupt, "d.npz"), "d.npz: zip: member 'd.npy'");
}

TEST(NpzMalformed, Rejected) {
  const auto good = encode_npz(sample_members());
  auto expect = [](const std::vector<uint8_t>& z, const std::string& sub) {
    const std::string m = minigpt::testing::error_of([&] { parse_npz(z, "x.npz"); });
    EXPECT_NE(m.find(sub), std::string::npos) << "expected '" << sub << "' in: " << m;
    EXPECT_NE(m.find("x.npz"), std::string::npos) << m;
  };
  // Bad CRC: flip one byte of the first member's data.
  auto crc = good;
  crc[30 + 5 + 100] ^= 1;
  expect(crc, "CRC-32 mismatch");
  // Truncated central directory: the EOCD survives but the directory it points at is cut.
  {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<ptrdiff_t>(cd_offset(good) + 20));
    cut.insert(cut.end(), good.end() - 22, good.end());
    expect(cut, "central directory");
  }
  // Truncated file: no end record at all.
  expect(std::vector<uint8_t>(good.begin(), good.end() - 10), "no end of central directory");
  expect(std::vector<uint8_t>(good.begin(), good.begin() + 10), "too short");
  // Unsupported compression method (12 = bzip2) in the central directory.
  auto method = good;
  method[cd_offset(good) + 10] = 12;
  expect(method, "unsupported compression method 12");
  // Encrypted flag.
  auto enc = good;
  enc[cd_offset(good) + 8] = 1;
  expect(enc, "is encrypted");
  // Multi-disk.
  auto disk = good;
  disk[eocd_offset(good) + 4] = 1;
  expect(disk, "multi-disk");
  // Member count past the directory.
  auto count = good;
  count[eocd_offset(good) + 8] = count[eocd_offset(good) + 10] = 3;
  expect(count, "central directory truncated");
  // Local header offset pointing at garbage, or past the end.
  auto local = good;
  local[cd_offset(good) + 42] = 7;
  expect(local, "bad local header signature");
  auto local_far = good;
  local_far[cd_offset(good) + 45] = 0x7f;
  expect(local_far, "runs past the end");
  // Stored member whose sizes disagree, compressed size past the directory.
  auto sizes = good;
  sizes[cd_offset(good) + 20] ^= 1;
  expect(sizes, "x.npz: zip: ");
  // Central directory offset past the end.
  auto cdo = good;
  cdo[eocd_offset(good) + 19] = 0x7f;
  expect(cdo, "runs past the end");
  // Duplicate names.
  auto dup = encode_npz({{"a.npy", {1}}, {"b.npy", {2}}});
  for (size_t i = 0; i + 5 <= dup.size(); ++i)
    if (std::memcmp(dup.data() + i, "b.npy", 5) == 0) dup[i] = 'a';
  expect(dup, "duplicate member 'a.npy'");
  // Zip64 markers with no zip64 extra field.
  auto z64 = good;
  for (int i = 0; i < 4; ++i) z64[cd_offset(good) + 24 + i] = 0xff;
  expect(z64, "no zip64 extra field");
}

TEST(Npz, ReadsNumpySavezAndSavezCompressed) {
  if (!have_python_module("numpy")) GTEST_SKIP() << "python3 with numpy not available";
  ScratchDir dir;
  // numpy writes every member with a zip64 extra field in its local header
  // (force_zip64=True); savez_compressed uses deflate.
  const std::string script =
      "import numpy as np, sys\n"
      "d = sys.argv[1]\n"
      "a = np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.1)\n"
      "i = np.array([[3, 17, 42]], dtype=np.int64)\n"
      "np.savez(d + '/s.npz', a=a, ids=i)\n"
      "np.savez_compressed(d + '/c.npz', a=a, ids=i)\n"
      "z = np.load(d + '/ours.npz', allow_pickle=False)\n"
      "assert sorted(z.files) == ['a', 'meta'], z.files\n"
      "assert z['a'].dtype == np.float32 and z['a'].shape == (4, 4)\n"
      "assert bytes(z['meta']) == b'{\"x\": 1}'\n";
  write_npz(dir.file("ours.npz"), sample_members());
  spit(dir.file("s.py"), as_bytes(script));
  ASSERT_EQ(std::system(("python3 " + dir.file("s.py") + " " + dir.path()).c_str()), 0);
  for (const char* name : {"s.npz", "c.npz"}) {
    const auto members = read_npz(dir.file(name));
    ASSERT_EQ(members.size(), 2u) << name;
    EXPECT_EQ(members[0].name, "a.npy");
    const Tensor a = npy_to_tensor_f32(members[0].bytes, name);
    EXPECT_EQ(a.shape(), (Shape{3, 4}));
    EXPECT_EQ(a.at({2, 3}), 11.0f * 0.1f);
    EXPECT_EQ(npy_to_token_ids(members[1].bytes, name).ids, (std::vector<int32_t>{3, 17, 42}));
  }
}
