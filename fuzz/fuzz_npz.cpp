// libFuzzer target: io::parse_npz (zip, deflate, CRC) on arbitrary bytes, then parse_npy on
// each member.
//
// Any input must either parse or throw minigpt::Error. A parsed archive must re-encode
// (STORED) and parse back to the same members.
#include "core/error.h"
#include "io/npy.h"
#include "io/npz.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<minigpt::io::NpzMember> members;
  try {
    members = minigpt::io::parse_npz(std::span<const uint8_t>(data, size), "fuzz");
  } catch (const minigpt::Error&) {
    return 0;
  }
  for (const auto& m : members) {
    try {
      (void)minigpt::io::parse_npy(m.bytes, "fuzz member");
    } catch (const minigpt::Error&) {
    }
  }
  std::vector<minigpt::io::NpzMember> again;
  try {
    again = minigpt::io::parse_npz(minigpt::io::encode_npz(members), "fuzz-rt");
  } catch (const minigpt::Error&) {
    return 0;  // the writer refuses some valid inputs (e.g. names of 65535 bytes); fine
  }
  if (again.size() != members.size()) __builtin_trap();
  for (size_t i = 0; i < again.size(); ++i)
    if (again[i].name != members[i].name || again[i].bytes != members[i].bytes) __builtin_trap();
  return 0;
}
