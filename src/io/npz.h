// NumPy .npz: a zip archive of .npy members. Read (STORED and DEFLATED members) and write
// (STORED).
//
// The reader trusts nothing: it finds the end-of-central-directory record, rejects multi-disk
// archives, walks the central directory (sizes and offsets from there, zip64 extra fields as
// numpy/Python's zipfile write them), checks every local header against it, rejects encrypted
// members and methods other than 0 (stored) and 8 (deflate), inflates with zlib into exactly
// the declared size, and checks CRC-32. Member count, member size and the compression ratio are
// capped so a small hostile file cannot ask for gigabytes. Names must be unique.
// What it does not do: parse the members (see io/npy.h), or write zip64 / compressed archives.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace minigpt::io {

inline constexpr size_t kNpzMaxMembers = 65535;
inline constexpr uint64_t kNpzMaxMemberBytes = uint64_t{4} << 30;  // 4 GiB uncompressed
inline constexpr uint64_t kNpzMaxDeflateRatio = 1100;              // deflate's limit is ~1032:1

struct NpzMember {
  std::string name;  // as stored, e.g. "wte.weight.npy"
  std::vector<uint8_t> bytes;  // uncompressed contents (a .npy file)
};

// All members in central-directory order. `source` names the archive in errors.
std::vector<NpzMember> parse_npz(std::span<const uint8_t> bytes, const std::string& source);
std::vector<NpzMember> read_npz(const std::string& path);

// A STORED zip of the members, with CRC-32s. Names must be unique and non-empty; the archive
// must stay below 4 GiB (no zip64 on write).
std::vector<uint8_t> encode_npz(const std::vector<NpzMember>& members);
void write_npz(const std::string& path, const std::vector<NpzMember>& members);  // atomic

}  // namespace minigpt::io
