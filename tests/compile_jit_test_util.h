// For the JIT's tests (compile_{jit,runtime,gemm,autotune}_test.cpp): a fresh cache folder per
// test, removed afterwards, so no test reads an entry another one (or the user) left behind.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace minigpt::testjit {

class TempCacheDir {
 public:
  TempCacheDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "minigpt_jit_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempCacheDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempCacheDir(const TempCacheDir&) = delete;
  TempCacheDir& operator=(const TempCacheDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace minigpt::testjit
