// Atomic file replacement: a reader sees either the old file or the complete new one, never a
// partial write, even if the process dies or the machine loses power mid-save.
//
// How: write a temporary file in the same folder (same filesystem, so rename is atomic), fsync
// it, rename it over the target, then fsync the folder so the rename itself is durable. On any
// failure (or if the writer is destroyed without commit()) the temporary is removed and the old
// file is untouched. What it does not do: lock against concurrent writers (the last commit wins)
// or create missing folders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace minigpt::io {

// Streams bytes into a temporary next to `path`; commit() publishes them under `path`.
//   AtomicFileWriter out(path);
//   out.write(header); out.write(data);
//   out.commit();   // without this, the destructor discards the temporary
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::span<const uint8_t> bytes) { write(bytes.data(), bytes.size()); }
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the target, fsync the folder. Throws Error (and removes the temporary)
  // on failure. Nothing may be written after commit().
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }  // for tests

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// One-shot helpers built on AtomicFileWriter.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace minigpt::io
