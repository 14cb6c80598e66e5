#pragma once
// A fresh folder under the system's temporary directory for tests that write files, removed with
// everything in it when the test ends.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace dpl::test {

class TempDir {
 public:
  /// Creates <tmp>/<prefix>_<pid>_<n>; the pid and a counter keep parallel tests apart.
  explicit TempDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// The path of name inside the folder.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace dpl::test
