#pragma once
// The log behind the LogReport extension (Chainer's LogReport): per-epoch means of observed
// values, kept in memory and written as JSON.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpl::train {

/// One entry of the log: the epoch and iteration it closes, the seconds since training started,
/// and named values ("main/loss", "validation/main/accuracy", ...) in the order they first came.
struct LogEntry {
  std::int64_t epoch = 0;                              ///< epochs completed
  std::int64_t iteration = 0;                          ///< iterations completed
  double elapsed_time = 0.0;                           ///< seconds since training started
  std::vector<std::pair<std::string, double>> values;  ///< named values, first-seen order

  /// The value under key; "epoch", "iteration" and "elapsed_time" name the fields above.
  /// Ensures: std::nullopt when the entry has no such value.
  std::optional<double> get(const std::string& key) const;
};

/// Accumulates observations during an epoch and closes each epoch into a LogEntry whose values
/// are the means of what was observed (Chainer's LogReport with an epoch trigger).
///
/// Each end_epoch() rewrites `<out_dir>/<filename>` as a JSON array with one object per epoch,
/// the values first, then "epoch", "iteration" and "elapsed_time", as Chainer writes it. The file
/// is replaced atomically (written beside it, then renamed), so a reader never sees half a log.
/// Meant for rank 0: create it there only, or every rank writes the same file.
class TrainingLog {
 public:
  /// out_dir empty keeps the log in memory only. The folder is created on first write.
  /// elapsed_time counts from this construction.
  explicit TrainingLog(std::string out_dir = "result", std::string filename = "log");

  /// Adds one observation of key to the current epoch (e.g. each iteration's "main/loss").
  void observe(const std::string& key, double value);

  /// Closes the current epoch: the means of its observations, then `extra` values (which replace
  /// means of the same key; this is where "validation/main/loss" and the like go), become a new
  /// entry; observations start afresh and the file is rewritten.
  /// elapsed_time defaults to the seconds since construction.
  /// Ensures: log().back() is the new entry, which is returned.
  /// Throws dpl::Error naming the path when the folder cannot be created or the file written.
  const LogEntry& end_epoch(std::int64_t epoch, std::int64_t iteration,
                            const std::vector<std::pair<std::string, double>>& extra = {},
                            std::optional<double> elapsed_time = std::nullopt);

  /// Observations of the current epoch not yet closed: the key, the sum and the count.
  struct Pending {
    std::string key;      ///< the observed key
    double sum = 0.0;     ///< the sum of its observations so far
    std::int64_t count = 1;  ///< how many there were (>= 1)
  };
  /// The current epoch's observations, in first-observed order (what a checkpoint keeps).
  const std::vector<Pending>& pending() const { return current_; }
  /// Continues a log saved elsewhere: log and pending replace this report's, and elapsed_time
  /// counts on from elapsed_seconds. Rewrites the file (when out_dir is set) so it shows the
  /// restored entries at once.
  /// Requires: counts >= 1 and a finite elapsed_seconds in [0, 1e9] (31 years); throws dpl::Error naming the key or
  /// the value otherwise, with the report unchanged.
  void restore(std::vector<LogEntry> log, std::vector<Pending> pending, double elapsed_seconds);

  /// Every closed epoch, oldest first.
  const std::vector<LogEntry>& log() const { return log_; }
  /// The file written ("" when out_dir is empty).
  std::string path() const;
  /// The log as the JSON text the file holds (4-space indent, like Chainer's).
  std::string to_json() const;
  /// Seconds since construction.
  double elapsed_time() const;

 private:
  void write() const;

  std::string out_dir_;
  std::string filename_;
  std::chrono::steady_clock::time_point start_;
  // First-observed order; few keys, so a linear scan is the fast lookup.
  std::vector<Pending> current_;
  std::vector<LogEntry> log_;
};

}  // namespace dpl::train
