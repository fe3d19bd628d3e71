// Test helper: a scratch folder under the system's temporary folder, removed with what it
// holds when the handle goes away, also when the test fails.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace hetps::testing {

// A folder under the system's temporary folder, named `prefix`-pid-n, removed (with what it
// holds) when the handle goes away, also when the test fails.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix)
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter_++))) {
    std::filesystem::remove_all(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace hetps::testing
