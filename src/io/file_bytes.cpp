#include "io/file_bytes.h"

#include "core/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace minigpt::io {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MINIGPT_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  MINIGPT_CHECK(::fstat(fd, &st) == 0, "{}: cannot stat: {}", path, std::strerror(errno));
  MINIGPT_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path);
  MINIGPT_CHECK(static_cast<uint64_t>(st.st_size) <= kMaxReadBytes, "{}: file of {} bytes is larger than the {} byte limit",
                path, static_cast<uint64_t>(st.st_size), kMaxReadBytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    MINIGPT_CHECK(n >= 0, "{}: read failed: {}", path, std::strerror(errno));
    MINIGPT_CHECK(n > 0, "{}: file shrank while reading ({} of {} bytes)", path, done, bytes.size());
    done += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace minigpt::io
