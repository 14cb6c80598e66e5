#pragma once
// Files that appear whole or not at all: the bytes go to a temporary file beside the target, which
// is flushed to disk, closed and renamed over the target only when every write succeeded. A
// failure leaves any previous target unchanged and no temporary behind, and its error names the
// file and the system's reason. Used for checkpoints, logs, summaries and traces, and to probe an
// output folder before training.

#include <cstddef>
#include <string>
#include <string_view>

namespace dpl::detail {

/// The system's text for an errno value.
std::string errno_text(int err);

class AtomicFile {
 public:
  /// Creates the temporary file beside target. `who` starts every error message (a function or
  /// a flag: "save_safetensors", "TrainingLog"). Throws dpl::Error when the folder cannot take it.
  AtomicFile(std::string target, std::string who);
  /// Removes the temporary file unless commit() moved it over the target.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends n bytes. Throws dpl::Error naming the target, the offset and the system's reason.
  void write(const void* data, std::size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Flushes, closes and renames the temporary over the target. Throws dpl::Error when any step
  /// fails (the target is then unchanged).
  void commit();
  /// The temporary file's path (for messages and tests).
  const std::string& temporary_path() const { return tmp_; }

 private:
  std::string target_, who_, tmp_;
  int fd_ = -1;
  std::size_t written_ = 0;
  bool committed_ = false;
};

/// The whole of `content` as the file `path`, atomically (see AtomicFile).
void write_file_atomically(const std::string& path, std::string_view content, const std::string& who);

/// Creates `folder` (and its parents) if needed and checks that a file can be written in it,
/// with a probe file that is removed again. Throws dpl::Error naming `who`, the folder and the
/// system's reason (not a folder, no permission, read-only file system...).
void prepare_output_folder(const std::string& folder, const std::string& who);

}  // namespace dpl::detail
