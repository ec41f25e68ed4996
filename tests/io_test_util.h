// Helpers shared by io_test.cpp and model_file_test.cpp: a scratch folder per test, file
// read/write, and "this call throws minigpt::Error whose message contains X".
#pragma once

#include "core/error.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace minigpt::testing {

// A fresh folder under the system temp dir, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "minigpt_io_XXXXXX").string();
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The message of the minigpt::Error that f throws, or a marker if it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const minigpt::Error& e) {
    return e.what();
  }
  return "<no error thrown>";
}

}  // namespace minigpt::testing

// EXPECT that `stmt` throws minigpt::Error with `substr` in its message (printed on failure).
#define EXPECT_ERROR_CONTAINS(stmt, substr)                                                    \
  do {                                                                                         \
    const std::string _msg = ::minigpt::testing::error_of([&] { stmt; });                      \
    EXPECT_NE(_msg.find(substr), std::string::npos) << "expected '" << (substr) << "' in: " << _msg; \
  } while (0)
