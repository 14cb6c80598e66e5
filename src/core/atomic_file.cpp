#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "dpl/core/error.hpp"

namespace dpl::detail {

namespace {

// write() moves at most about 2 GiB per call on Linux; larger buffers go in pieces.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

// Makes the rename itself durable. Best effort: some file systems cannot fsync a folder, and by now
// the new file is complete and in place.
void sync_folder(const std::string& target) {
  std::string folder = std::filesystem::path(target).parent_path().string();
  if (folder.empty()) folder = ".";
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string errno_text(int err) { return std::strerror(err); }

// A name in the target's folder that no other writer uses: the pid separates processes, the
// counter separates threads and calls; O_EXCL makes a clash an error instead of a shared file.
AtomicFile::AtomicFile(std::string target, std::string who) : target_(std::move(target)), who_(std::move(who)) {
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::ostringstream name;
    name << target_ << ".tmp." << ::getpid() << '.' << counter.fetch_add(1);
    const std::string candidate = name.str();
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      tmp_ = candidate;
      fd_ = fd;
      return;
    }
    if (errno != EEXIST)
      DPL_FAIL(who_, ": cannot create the temporary file ", candidate, " to write ", target_, ": ", errno_text(errno));
  }
  DPL_FAIL(who_, ": cannot find an unused temporary file name beside ", target_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  DPL_CHECK(fd_ >= 0 && !committed_, who_, ": writing ", target_, " after it was committed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min(n, kMaxChunk));
    if (w < 0 && errno == EINTR) continue;
    // No progress and no error is treated as an I/O failure, never spun on.
    const int err = w < 0 ? errno : w == 0 ? EIO : 0;
    if (err != 0)
      DPL_FAIL(who_, ": writing ", target_, " failed at byte offset ", written_, " of the temporary file ", tmp_, ": ",
               errno_text(err), "; any previous ", target_, " is unchanged");
    p += w;
    n -= static_cast<std::size_t>(w);
    written_ += static_cast<std::size_t>(w);
  }
}

void AtomicFile::commit() {
  DPL_CHECK(fd_ >= 0 && !committed_, who_, ": ", target_, " was already committed");
  if (::fsync(fd_) != 0)
    DPL_FAIL(who_, ": flushing ", tmp_, " to disk failed: ", errno_text(errno), "; any previous ", target_,
             " is unchanged");
  const int fd = fd_;
  fd_ = -1;
  // close() can report a deferred write error (NFS); such a file must not replace the target.
  if (::close(fd) != 0)
    DPL_FAIL(who_, ": closing ", tmp_, " failed: ", errno_text(errno), "; any previous ", target_, " is unchanged");
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    DPL_FAIL(who_, ": cannot move ", tmp_, " to ", target_, ": ", errno_text(errno));
  committed_ = true;
  sync_folder(target_);
}

void write_file_atomically(const std::string& path, std::string_view content, const std::string& who) {
  AtomicFile file(path, who);
  file.write(content);
  file.commit();
}

void prepare_output_folder(const std::string& folder, const std::string& who) {
  namespace fs = std::filesystem;
  DPL_CHECK(!folder.empty(), who, ": expected an output folder, got an empty path");
  std::error_code ec;
  const fs::file_status st = fs::status(folder, ec);
  DPL_CHECK(!fs::exists(st) || fs::is_directory(st), who, ": the output folder ", folder,
            " exists and is not a folder; expected a folder (or a path to create one)");
  fs::create_directories(folder, ec);
  DPL_CHECK(!ec, who, ": cannot create the output folder ", folder, ": ", ec.message());
  // A probe file, created and removed, finds read-only file systems and missing permissions now,
  // before any training, instead of at the first log write.
  AtomicFile probe((fs::path(folder) / ".write-probe").string(), who + " (checking the output folder " + folder + ")");
  probe.write("ok", 2);
}

}  // namespace dpl::detail
