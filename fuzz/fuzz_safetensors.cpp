// libFuzzer target: io::parse_safetensors on arbitrary bytes.
//
// Any input must either parse or throw minigpt::Error; any other exception, crash or sanitizer
// report is a bug. A parsed file must also survive a write/parse round trip unchanged.
#include "core/error.h"
#include "io/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  minigpt::io::SafetensorsIndex index;
  try {
    index = minigpt::io::parse_safetensors(bytes, "fuzz");
  } catch (const minigpt::Error&) {
    return 0;
  }
  // Every entry's range lies inside the input (ASan checks the reads).
  std::vector<minigpt::io::SafetensorsItem> items;
  unsigned sum = 0;
  for (const auto& e : index.entries) {
    const auto span = bytes.subspan(e.begin, e.end - e.begin);
    for (uint8_t b : span) sum += b;
    items.push_back({e.name, e.dtype, e.shape, span});
  }
  // Round trip: what we write, we read back identically.
  const auto again = minigpt::io::parse_safetensors(minigpt::io::encode_safetensors(items, index.metadata), "fuzz-rt");
  if (again.entries.size() != index.entries.size() || again.metadata != index.metadata) __builtin_trap();
  for (size_t i = 0; i < again.entries.size(); ++i) {
    const auto &a = again.entries[i], &b = index.entries[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.end - a.begin != b.end - b.begin) __builtin_trap();
  }
  return static_cast<int>(sum & 0);
}
