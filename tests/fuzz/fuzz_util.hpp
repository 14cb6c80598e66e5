#pragma once
// What the harnesses share: handing an input to a reader that takes a path without touching the
// disk, and the contract every harness checks — bad input raises dpl::Error and nothing else.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dpl/core/error.hpp"

namespace dpl::fuzz {

/// Stops the run with a message: a broken promise of the library is a finding, like a crash.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

inline void require(bool cond, const std::string& what) {
  if (!cond) finding(what);
}

/// An anonymous in-memory file (memfd) reachable by a path (/proc/self/fd/N), so that readers
/// which take a path read the input at memory speed and the disk is never worn by millions of
/// runs. One per harness and process; not thread-safe.
class MemoryFile {
 public:
  explicit MemoryFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) finding(std::string("memfd_create failed: ") + std::strerror(errno));
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }

  /// Replaces the contents with data[0, size) and returns the path that reads them.
  const std::string& write(const void* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) finding(std::string("ftruncate failed: ") + std::strerror(errno));
    const char* p = static_cast<const char*>(data);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) finding(std::string("pwrite to the memory file failed: ") + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return path_;
  }

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

/// Runs fn; dpl::Error is the documented answer to bad input and is swallowed. Any other
/// exception escapes, and libFuzzer (or the replay test) reports it as a finding.
/// Returns true when fn returned normally.
template <typename Fn>
bool accepts(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const dpl::Error&) {
    return false;
  }
}

}  // namespace dpl::fuzz
