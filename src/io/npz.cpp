#include "io/npz.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <set>

namespace minigpt::io {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;

// Bounds-checked little-endian reads over the archive; every read names what it was reading.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& source) : b_(bytes), source_(source) {}
  uint64_t size() const { return b_.size(); }
  void need(uint64_t pos, uint64_t len, const char* what) const {
    MINIGPT_CHECK(pos <= b_.size() && len <= b_.size() - pos, "{}: zip: {} at offset {} ({} bytes) runs past the end of the file",
                  source_, what, pos, len);
  }
  uint16_t u16(uint64_t pos) const { return static_cast<uint16_t>(b_[pos] | (b_[pos + 1] << 8)); }
  uint32_t u32(uint64_t pos) const { return static_cast<uint32_t>(u16(pos)) | (static_cast<uint32_t>(u16(pos + 2)) << 16); }
  uint64_t u64(uint64_t pos) const { return static_cast<uint64_t>(u32(pos)) | (static_cast<uint64_t>(u32(pos + 4)) << 32); }
  std::span<const uint8_t> span(uint64_t pos, uint64_t len) const { return b_.subspan(pos, len); }

 private:
  std::span<const uint8_t> b_;
  const std::string& source_;
};

struct CentralEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local_offset = 0;
};

// Applies the zip64 extra field (id 1) to the fields stored as 0xFFFFFFFF, in the order the
// spec gives: uncompressed size, compressed size, local header offset.
void apply_zip64_extra(const Reader& r, uint64_t extra, uint64_t extra_len, CentralEntry& e, bool uncomp64, bool comp64,
                       bool offset64, const std::string& source) {
  uint64_t pos = extra;
  const uint64_t end = extra + extra_len;
  while (end - pos >= 4) {
    const uint16_t id = r.u16(pos), len = r.u16(pos + 2);
    pos += 4;
    MINIGPT_CHECK(len <= end - pos, "{}: zip: member '{}': extra field runs past its end", source, e.name);
    if (id == kZip64ExtraId) {
      uint64_t p = pos;
      auto take = [&](uint64_t& field) {
        MINIGPT_CHECK(p + 8 <= pos + len, "{}: zip: member '{}': zip64 extra field too short", source, e.name);
        field = r.u64(p);
        p += 8;
      };
      if (uncomp64) take(e.uncompressed);
      if (comp64) take(e.compressed);
      if (offset64) take(e.local_offset);
      return;
    }
    pos += len;
  }
  MINIGPT_FAIL("{}: zip: member '{}': sizes marked zip64 but no zip64 extra field", source, e.name);
}

std::vector<uint8_t> inflate_raw(std::span<const uint8_t> in, uint64_t out_size, const std::string& source,
                                 const std::string& name) {
  std::vector<uint8_t> out(static_cast<size_t>(out_size));
  z_stream zs{};
  MINIGPT_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, "{}: zip: zlib init failed", source);
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  // zlib counts in uInt; feed and drain in chunks so sizes above 4 GiB work too.
  constexpr uint64_t kChunk = 1u << 30;
  uint64_t in_pos = 0, out_pos = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      const uint64_t n = std::min<uint64_t>(kChunk, in.size() - in_pos);
      zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
      zs.avail_in = static_cast<uInt>(n);
      in_pos += n;
    }
    // One spare byte past the declared size lets us notice a stream that inflates to more.
    uint8_t spare = 0;
    if (out_pos < out_size) {
      const uint64_t n = std::min<uint64_t>(kChunk, out_size - out_pos);
      zs.next_out = out.data() + out_pos;
      zs.avail_out = static_cast<uInt>(n);
    } else {
      zs.next_out = &spare;
      zs.avail_out = 1;
    }
    const uInt before_out = zs.avail_out;
    const uInt before_in = zs.avail_in;
    rc = inflate(&zs, Z_NO_FLUSH);
    MINIGPT_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "{}: zip: member '{}': corrupt deflate data ({})",
                  source, name, zs.msg ? zs.msg : "zlib error");
    const uInt produced = before_out - zs.avail_out;
    MINIGPT_CHECK(!(out_pos >= out_size && produced > 0), "{}: zip: member '{}': inflates to more than the declared {} bytes",
                  source, name, out_size);
    if (out_pos < out_size) out_pos += produced;
    if (rc == Z_BUF_ERROR || (produced == 0 && before_in == zs.avail_in && rc != Z_STREAM_END)) {
      MINIGPT_CHECK(in_pos < in.size() || zs.avail_in > 0, "{}: zip: member '{}': deflate data truncated", source, name);
    }
  }
  MINIGPT_CHECK(out_pos == out_size, "{}: zip: member '{}': inflates to {} bytes, declared {}", source, name, out_pos, out_size);
  return out;
}

uint32_t crc32_of(std::span<const uint8_t> data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t pos = 0;
  while (pos < data.size()) {  // crc32 takes uInt lengths
    const size_t n = std::min<size_t>(data.size() - pos, 1u << 30);
    crc = crc32(crc, data.data() + pos, static_cast<uInt>(n));
    pos += n;
  }
  return static_cast<uint32_t>(crc);
}

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v));
  put16(out, static_cast<uint16_t>(v >> 16));
}

}  // namespace

std::vector<NpzMember> parse_npz(std::span<const uint8_t> bytes, const std::string& source) {
  const Reader r(bytes, source);
  MINIGPT_CHECK(r.size() >= kEndSize, "{}: not a zip/npz file: {} bytes is too short", source, r.size());

  // End of central directory: the last record, followed by at most a 65535-byte comment.
  uint64_t eocd = std::numeric_limits<uint64_t>::max();
  const uint64_t lowest = r.size() >= kEndSize + 65535 ? r.size() - kEndSize - 65535 : 0;
  for (uint64_t pos = r.size() - kEndSize + 1; pos-- > lowest;) {
    if (r.u32(pos) == kEndSig && pos + kEndSize + r.u16(pos + 20) == r.size()) {
      eocd = pos;
      break;
    }
  }
  MINIGPT_CHECK(eocd != std::numeric_limits<uint64_t>::max(),
                "{}: not a zip/npz file: no end of central directory record (truncated?)", source);
  const uint16_t disk = r.u16(eocd + 4), cd_disk = r.u16(eocd + 6);
  uint64_t entries_here = r.u16(eocd + 8), entries = r.u16(eocd + 10);
  uint64_t cd_size = r.u32(eocd + 12), cd_offset = r.u32(eocd + 16);
  MINIGPT_CHECK(disk == 0 && cd_disk == 0 && entries_here == entries, "{}: zip: multi-disk archives are not supported", source);

  // zip64: a locator just before the EOCD points at the zip64 end record (Python's zipfile
  // looks for it the same way). Without one, 0xFFFF entries is a real count, but 0xFFFFFFFF
  // sizes or offsets cannot be.
  const bool zip64 = eocd >= kZip64LocatorSize && r.u32(eocd - kZip64LocatorSize) == kZip64LocatorSig;
  MINIGPT_CHECK(zip64 || (cd_size != 0xFFFFFFFF && cd_offset != 0xFFFFFFFF),
                "{}: zip: zip64 end-of-central-directory locator missing", source);
  if (zip64) {
    const uint64_t loc = eocd - kZip64LocatorSize;
    MINIGPT_CHECK(r.u32(loc + 4) == 0 && r.u32(loc + 16) <= 1, "{}: zip: multi-disk archives are not supported", source);
    const uint64_t z64 = r.u64(loc + 8);
    r.need(z64, kZip64EndSize, "zip64 end record");
    MINIGPT_CHECK(r.u32(z64) == kZip64EndSig, "{}: zip: bad zip64 end-of-central-directory signature", source);
    MINIGPT_CHECK(r.u32(z64 + 16) == 0 && r.u32(z64 + 20) == 0 && r.u64(z64 + 24) == r.u64(z64 + 32),
                  "{}: zip: multi-disk archives are not supported", source);
    entries = r.u64(z64 + 32);
    cd_size = r.u64(z64 + 40);
    cd_offset = r.u64(z64 + 48);
  }
  MINIGPT_CHECK(entries <= kNpzMaxMembers, "{}: zip: {} members, more than the limit of {}", source, entries, kNpzMaxMembers);
  r.need(cd_offset, cd_size, "central directory");
  MINIGPT_CHECK(cd_offset + cd_size <= eocd, "{}: zip: central directory overlaps the end record", source);

  std::vector<CentralEntry> central;
  std::set<std::string> names;
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < entries; ++i) {
    MINIGPT_CHECK(pos + kCentralSize <= cd_end, "{}: zip: central directory truncated at entry {} of {}", source, i, entries);
    MINIGPT_CHECK(r.u32(pos) == kCentralSig, "{}: zip: bad central directory signature at entry {}", source, i);
    CentralEntry e;
    e.flags = r.u16(pos + 8);
    e.method = r.u16(pos + 10);
    e.crc = r.u32(pos + 16);
    e.compressed = r.u32(pos + 20);
    e.uncompressed = r.u32(pos + 24);
    const uint16_t name_len = r.u16(pos + 28), extra_len = r.u16(pos + 30), comment_len = r.u16(pos + 32);
    const uint16_t start_disk = r.u16(pos + 34);
    e.local_offset = r.u32(pos + 42);
    const uint64_t var = uint64_t{name_len} + extra_len + comment_len;
    MINIGPT_CHECK(pos + kCentralSize + var <= cd_end, "{}: zip: central directory truncated in entry {}", source, i);
    const auto name = r.span(pos + kCentralSize, name_len);
    e.name.assign(name.begin(), name.end());
    MINIGPT_CHECK(!e.name.empty(), "{}: zip: entry {} has an empty name", source, i);
    MINIGPT_CHECK(start_disk == 0 || start_disk == 0xFFFF, "{}: zip: member '{}' on another disk: multi-disk archives are not supported",
                  source, e.name);
    const bool u64 = e.uncompressed == 0xFFFFFFFF, c64 = e.compressed == 0xFFFFFFFF, o64 = e.local_offset == 0xFFFFFFFF;
    if (u64 || c64 || o64)
      apply_zip64_extra(r, pos + kCentralSize + name_len, extra_len, e, u64, c64, o64, source);
    MINIGPT_CHECK(names.insert(e.name).second, "{}: zip: duplicate member '{}'", source, e.name);
    MINIGPT_CHECK((e.flags & 0x1) == 0 && (e.flags & 0x40) == 0, "{}: zip: member '{}' is encrypted", source, e.name);
    MINIGPT_CHECK(e.method == 0 || e.method == 8,
                  "{}: zip: member '{}' uses unsupported compression method {} (only stored and deflate)", source, e.name,
                  e.method);
    MINIGPT_CHECK(e.uncompressed <= kNpzMaxMemberBytes, "{}: zip: member '{}' of {} bytes exceeds the {} byte limit", source,
                  e.name, e.uncompressed, kNpzMaxMemberBytes);
    central.push_back(std::move(e));
    pos += kCentralSize + var;
  }
  MINIGPT_CHECK(pos == cd_end, "{}: zip: central directory has {} bytes after its {} entries", source, cd_end - pos, entries);

  std::vector<NpzMember> members;
  members.reserve(central.size());
  for (const auto& e : central) {
    // The local header repeats the name; its sizes may be zero (data descriptor) or zip64
    // placeholders, so they are not used: the central directory is authoritative.
    r.need(e.local_offset, kLocalSize, "local header");
    MINIGPT_CHECK(r.u32(e.local_offset) == kLocalSig, "{}: zip: member '{}': bad local header signature", source, e.name);
    const uint16_t name_len = r.u16(e.local_offset + 26), extra_len = r.u16(e.local_offset + 28);
    r.need(e.local_offset + kLocalSize, uint64_t{name_len} + extra_len, "local header name");
    const auto local_name = r.span(e.local_offset + kLocalSize, name_len);
    MINIGPT_CHECK(std::string(local_name.begin(), local_name.end()) == e.name,
                  "{}: zip: member '{}': local header names a different file", source, e.name);
    const uint64_t data = e.local_offset + kLocalSize + name_len + extra_len;
    r.need(data, e.compressed, "member data");
    MINIGPT_CHECK(data + e.compressed <= cd_offset, "{}: zip: member '{}': data overlaps the central directory", source, e.name);
    const auto packed = r.span(data, e.compressed);

    NpzMember m;
    m.name = e.name;
    if (e.method == 0) {
      MINIGPT_CHECK(e.compressed == e.uncompressed, "{}: zip: stored member '{}' has compressed size {} != size {}", source,
                    e.name, e.compressed, e.uncompressed);
      m.bytes.assign(packed.begin(), packed.end());
    } else {
      MINIGPT_CHECK(e.uncompressed <= (e.compressed + 64) * kNpzMaxDeflateRatio,
                    "{}: zip: member '{}' claims {} bytes from {} compressed: beyond deflate's ratio", source, e.name,
                    e.uncompressed, e.compressed);
      m.bytes = inflate_raw(packed, e.uncompressed, source, e.name);
    }
    const uint32_t crc = crc32_of(m.bytes);
    MINIGPT_CHECK(crc == e.crc, "{}: zip: member '{}': CRC-32 mismatch (stored {:08x}, computed {:08x})", source, e.name, e.crc,
                  crc);
    members.push_back(std::move(m));
  }
  return members;
}

std::vector<NpzMember> read_npz(const std::string& path) { return parse_npz(read_file_bytes(path), path); }

std::vector<uint8_t> encode_npz(const std::vector<NpzMember>& members) {
  MINIGPT_CHECK(members.size() < 0xFFFF, "npz write: {} members need zip64, which the writer does not produce", members.size());
  std::vector<uint8_t> out, central;
  std::set<std::string> names;
  constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: reproducible files
  for (const auto& m : members) {
    MINIGPT_CHECK(!m.name.empty() && m.name.size() < 0xFFFF, "npz write: invalid member name '{}'", m.name);
    MINIGPT_CHECK(names.insert(m.name).second, "npz write: duplicate member '{}'", m.name);
    MINIGPT_CHECK(m.bytes.size() < 0xFFFFFFFFull && out.size() < 0xFFFFFFFFull,
                  "npz write: archive past 4 GiB needs zip64, which the writer does not produce");
    const uint32_t crc = crc32_of(m.bytes);
    const auto offset = static_cast<uint32_t>(out.size());
    const auto size = static_cast<uint32_t>(m.bytes.size());
    const auto name_len = static_cast<uint16_t>(m.name.size());
    // Local header: version 2.0, no flags, stored.
    put32(out, kLocalSig);
    put16(out, 20);
    put16(out, 0);
    put16(out, 0);
    put16(out, 0);
    put16(out, kDosDate);
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, name_len);
    put16(out, 0);
    out.insert(out.end(), m.name.begin(), m.name.end());
    out.insert(out.end(), m.bytes.begin(), m.bytes.end());
    // Central directory entry.
    put32(central, kCentralSig);
    put16(central, 20);  // made by: 2.0
    put16(central, 20);  // needed: 2.0
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, kDosDate);
    put32(central, crc);
    put32(central, size);
    put32(central, size);
    put16(central, name_len);
    put16(central, 0);  // extra
    put16(central, 0);  // comment
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0);  // external attributes
    put32(central, offset);
    central.insert(central.end(), m.name.begin(), m.name.end());
  }
  MINIGPT_CHECK(out.size() + central.size() < 0xFFFFFFFFull, "npz write: archive past 4 GiB needs zip64");
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), central.begin(), central.end());
  put32(out, kEndSig);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint16_t>(members.size()));
  put16(out, static_cast<uint16_t>(members.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, cd_offset);
  put16(out, 0);  // comment length
  return out;
}

void write_npz(const std::string& path, const std::vector<NpzMember>& members) {
  write_file_atomic(path, encode_npz(members));
}

}  // namespace minigpt::io
