// FileLock: an exclusive flock(2) on a file, held until destroyed (the kernel drops it if the
// process dies). The JIT caches (jit.cpp, cuda/jit_cuda.cpp) take one per cache key on a miss,
// so that concurrent processes wait for one compile and then load its entry.
//
// What it does not do: time out, or lock across machines (flock on NFS is advisory at best).
#pragma once

#include "core/error.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace minigpt::compile {

class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    MINIGPT_CHECK(fd_ >= 0, "jit: cannot open the lock {}: {}", path.string(), std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      MINIGPT_FAIL("jit: cannot lock {}: {}", path.string(), std::strerror(err));
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace minigpt::compile
