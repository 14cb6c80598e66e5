#pragma once
// The table behind the PrintReport extension (Chainer's PrintReport): a fixed-width table with
// one row per log entry.

#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include "dpl/train/console.hpp"
#include "dpl/train/training_log.hpp"

namespace dpl::train {

/// value as %g prints it when that fits in width characters, else with fewer significant digits
/// until it does (1.17885e-06 in 10 characters is 1.1789e-06), so a small learning rate cannot
/// push the later columns of a table out of line. Ensures: at most width characters whenever
/// width >= 7 (the longest one-digit form, "-1e-300"); below that, the shortest form.
std::string format_value(double value, std::size_t width);

/// Prints log entries as Chainer's PrintReport does: a header line of the entry names, each
/// left-aligned in a column of max(10, name length) characters, columns separated by two spaces;
/// then one row per entry, each value printed with %g (format_value: fewer digits when %g would
/// overrun the column) left-aligned in its column and followed by two spaces (a blank column when
/// the entry lacks the value). On a terminal each line first
/// clears the line it lands on, so it cleanly replaces a progress bar drawn there.
class ReportTable {
 public:
  /// epoch, main/loss, validation/main/loss, main/accuracy, validation/main/accuracy,
  /// elapsed_time: the columns of ChainerMN's MNIST example.
  static std::vector<std::string> default_entries();

  /// Requires: out outlives this report; entries non-empty.
  explicit ReportTable(std::ostream& out = std::cout, std::vector<std::string> entries = default_entries(),
                       OutputMode mode = OutputMode::kAuto);

  /// Prints the header (the first time only), then entry's row, and flushes.
  void print(const LogEntry& entry);
  /// Prints every entry of log.log() not printed by an earlier update(), oldest first.
  void update(const TrainingLog& log);

  /// The header line, without a newline.
  std::string header() const;
  /// entry's row, without a newline (it ends with the two spaces after the last column).
  std::string row(const LogEntry& entry) const;

 private:
  void begin_line();

  std::ostream& out_;
  std::vector<std::string> entries_;
  std::vector<std::size_t> widths_;
  bool terminal_;
  bool header_done_ = false;
  std::size_t printed_ = 0;
};

}  // namespace dpl::train
