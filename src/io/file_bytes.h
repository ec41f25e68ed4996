// Whole-file reads for the loaders: a path in, its bytes out, with an error naming the path.
//
// Model files, token-id arrays and checkpoints are small (megabytes), so the loaders read the
// whole file and parse from a byte span; the same parse functions serve the fuzzers, which have
// no files. This file does not write (see io/atomic_file.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::io {

// Largest file read_file_bytes accepts (4 GiB): a guard against reading a device or a huge
// unrelated file by mistake.
inline constexpr uint64_t kMaxReadBytes = uint64_t{4} << 30;

std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace minigpt::io
