#include "io/atomic_file.h"

#include "core/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace minigpt::io {

namespace {

// Folder of a path ("." for a bare name), for the temporary and the folder fsync.
std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  MINIGPT_CHECK(!path_.empty() && path_.back() != '/', "atomic write: '{}' is not a file path", path_);
  // Hidden temporary in the target's folder: rename() is only atomic within one filesystem.
  std::string pattern = parent_dir(path_) + "/." + base_name(path_) + ".tmp.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  fd_ = ::mkostemp(buf.data(), O_CLOEXEC);
  MINIGPT_CHECK(fd_ >= 0, "{}: cannot create a temporary file in {}: {}", path_, parent_dir(path_),
                std::strerror(errno));
  temp_path_ = buf.data();
  // mkstemp creates 0600; keep the mode of the file we replace, else the usual 0644.
  struct stat st {};
  const mode_t mode = ::stat(path_.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  if (::fchmod(fd_, mode) != 0) {
    const int err = errno;
    discard();
    MINIGPT_FAIL("{}: cannot set the mode of {}: {}", path_, temp_path_, std::strerror(err));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFileWriter::write(const void* data, size_t size) {
  MINIGPT_CHECK(fd_ >= 0, "{}: write after commit or after a failed write", path_);
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      discard();
      MINIGPT_FAIL("{}: write failed: {}", path_, std::strerror(err));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  MINIGPT_CHECK(fd_ >= 0, "{}: commit after commit or after a failed write", path_);
  // Data must be on disk before the rename makes it visible, or a crash could publish a
  // file whose blocks were never written.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    MINIGPT_FAIL("{}: fsync failed: {}", path_, std::strerror(err));
  }
  const int close_rc = ::close(fd_);
  fd_ = -1;
  if (close_rc != 0) {
    const int err = errno;
    discard();
    MINIGPT_FAIL("{}: close failed: {}", path_, std::strerror(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    discard();
    MINIGPT_FAIL("{}: cannot rename the temporary into place: {}", path_, std::strerror(err));
  }
  temp_path_.clear();
  committed_ = true;
  // The rename is a change to the folder; fsync it so the new name survives a crash.
  const std::string dir = parent_dir(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MINIGPT_CHECK(dfd >= 0, "{}: cannot open folder {} to fsync it: {}", path_, dir, std::strerror(errno));
  const int sync_rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  MINIGPT_CHECK(sync_rc == 0, "{}: fsync of folder {} failed: {}", path_, dir, std::strerror(err));
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFileWriter out(path);
  out.write(bytes);
  out.commit();
}

void write_file_atomic(const std::string& path, std::string_view text) {
  AtomicFileWriter out(path);
  out.write(text);
  out.commit();
}

}  // namespace minigpt::io
