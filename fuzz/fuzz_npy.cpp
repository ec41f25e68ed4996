// libFuzzer target: io::parse_npy and the typed readers on arbitrary bytes.
//
// Any input must either parse or throw minigpt::Error. A parsed array must re-encode and parse
// back to the same dtype, shape and data.
#include "core/error.h"
#include "io/npy.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  minigpt::io::NpyArray a;
  try {
    a = minigpt::io::parse_npy(bytes, "fuzz");
  } catch (const minigpt::Error&) {
    return 0;
  }
  const auto payload = bytes.subspan(a.data_begin, a.data_end - a.data_begin);
  const auto again_bytes = minigpt::io::encode_npy(a.dtype, a.shape, payload);
  const auto b = minigpt::io::parse_npy(again_bytes, "fuzz-rt");
  if (b.dtype != a.dtype || b.shape != a.shape || b.data_end - b.data_begin != payload.size() ||
      (!payload.empty() && std::memcmp(again_bytes.data() + b.data_begin, payload.data(), payload.size()) != 0))
    __builtin_trap();
  // The typed readers either succeed or throw Error (dtype mismatch, token id range).
  try {
    switch (a.dtype) {
      case minigpt::io::DType::F32: (void)minigpt::io::npy_to_tensor_f32(bytes, "fuzz"); break;
      case minigpt::io::DType::I32:
      case minigpt::io::DType::I64: (void)minigpt::io::npy_to_token_ids(bytes, "fuzz"); break;
      case minigpt::io::DType::U8: (void)minigpt::io::npy_to_u8(bytes, "fuzz"); break;
      default: break;
    }
  } catch (const minigpt::Error&) {
  }
  return 0;
}
