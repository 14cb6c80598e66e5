#pragma once
// The progress display behind the ProgressBar extension (Chainer's ProgressBar): overall and
// per-epoch progress, speed and time to finish.

#include <chrono>
#include <cstdint>
#include <deque>
#include <iostream>
#include <string>
#include <vector>

#include "dpl/train/console.hpp"
#include "dpl/train/trigger.hpp"

namespace dpl::train {

/// Tuning of ProgressDisplay.
struct ProgressBarOptions {
  /// Draw at iterations that are multiples of this (Chainer's default: 100).
  std::int64_t update_interval = 100;
  /// Characters between the brackets of each bar.
  int bar_length = 50;
  /// In plain mode, at most one line per this many seconds (checked at draw iterations); 0 prints
  /// at every draw iteration.
  double plain_interval_seconds = 10.0;
  /// Terminal block or plain lines; kAuto asks is_terminal(out).
  OutputMode mode = OutputMode::kAuto;
};

/// Shows training progress. On a terminal it draws Chainer's four-line block and redraws it in
/// place (ANSI "erase below" and "cursor up"):
///
///          total [#########.........................................] 18.50%
///     this epoch [##########################........................] 52.50%
///           1234 iter, 2 epoch / 20 epochs
///         123.45 iters/sec. Estimated time to finish: 0:01:23.456789.
///
/// Elsewhere (a file, a pipe) it appends one line per draw, no more often than
/// plain_interval_seconds:
///
///     1234 iter, 2 epoch / 20 epochs, total 18.50%, this epoch 52.50%, 123.45 iters/sec, estimated time to finish: 0:01:23.456789
///
/// Speed is measured over the last ten draws. Meant for rank 0.
class ProgressDisplay {
 public:
  /// training_length counts epochs or iterations per unit.
  /// Requires: training_length >= 1, options.update_interval >= 1, options.bar_length >= 1;
  /// out outlives this bar.
  ProgressDisplay(std::int64_t training_length, LengthUnit unit = LengthUnit::kEpoch, std::ostream& out = std::cout,
                  ProgressBarOptions options = {});
  /// Calls close().
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  /// Call after every iteration with the iterator's iteration() and epoch_detail(); draws when
  /// iteration is a multiple of update_interval.
  void update(std::int64_t iteration, double epoch_detail);
  /// As above with the time in seconds on any steady clock of the caller's (for reproducible
  /// output); do not mix with the overload that reads the clock itself.
  void update(std::int64_t iteration, double epoch_detail, double now_seconds);
  /// On a terminal, erases the block; idempotent.
  void close();

  /// The terminal block's four lines (without newlines) for the given state.
  std::vector<std::string> block_lines(std::int64_t iteration, double epoch_detail, double iters_per_sec,
                                       double seconds_left) const;
  /// The plain-mode line (without newline) for the given state.
  std::string plain_line(std::int64_t iteration, double epoch_detail, double iters_per_sec,
                         double seconds_left) const;

 private:
  struct Sample {
    std::int64_t iteration;
    double epoch_detail;
    double seconds;
  };
  std::string bar(double rate) const;
  std::string status(std::int64_t iteration, double epoch_detail) const;

  std::int64_t length_;
  LengthUnit unit_;
  std::ostream& out_;
  ProgressBarOptions options_;
  bool terminal_;
  bool drawn_ = false;
  bool closed_ = false;
  std::deque<Sample> recent_;
  double last_plain_ = -1.0;
  std::chrono::steady_clock::time_point clock_start_;
};

/// Python's str(datetime.timedelta(seconds=s)), which Chainer prints: "H:MM:SS" with
/// ".ffffff" when there are microseconds, and "N day(s), " in front beyond 24 hours.
/// Requires a finite s >= 0.
std::string format_timedelta(double seconds);

}  // namespace dpl::train
