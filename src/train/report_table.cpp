#include "dpl/train/report_table.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dpl/core/error.hpp"

namespace dpl::train {

namespace {
constexpr const char* kEraseLine = "\033[2K";

std::string pad_right(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

// Python's format(value, "g"), which Chainer uses for every column: printf's %g agrees with it
// for finite values, and Python spells the others "inf", "-inf" and "nan".
std::string format_value(double value, std::size_t width) {
  char buf[64];
  for (int digits = 6;; --digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (std::strlen(buf) <= width || digits == 1) return buf;
  }
}

std::vector<std::string> ReportTable::default_entries() {
  return {"epoch", "main/loss", "validation/main/loss", "main/accuracy", "validation/main/accuracy", "elapsed_time"};
}

ReportTable::ReportTable(std::ostream& out, std::vector<std::string> entries, OutputMode mode)
    : out_(out), entries_(std::move(entries)), terminal_(resolve_mode(mode, out) == OutputMode::kTerminal) {
  DPL_CHECK(!entries_.empty(), "ReportTable: expected at least one entry (column) name");
  for (const std::string& e : entries_) widths_.push_back(std::max<std::size_t>(10, e.size()));
}

std::string ReportTable::header() const {
  std::string line;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (i) line += "  ";
    line += pad_right(entries_[i], widths_[i]);
  }
  return line;
}

std::string ReportTable::row(const LogEntry& entry) const {
  std::string line;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::optional<double> v = entry.get(entries_[i]);
    line += pad_right(v ? format_value(*v, widths_[i]) : std::string(), widths_[i]);
    line += "  ";
  }
  return line;
}

void ReportTable::begin_line() {
  if (terminal_) out_ << kEraseLine;
}

void ReportTable::print(const LogEntry& entry) {
  if (!header_done_) {
    begin_line();
    out_ << header() << '\n';
    header_done_ = true;
  }
  begin_line();
  out_ << row(entry) << '\n';
  out_.flush();
}

void ReportTable::update(const TrainingLog& log) {
  const auto& entries = log.log();
  while (printed_ < entries.size()) print(entries[printed_++]);
}

}  // namespace dpl::train
