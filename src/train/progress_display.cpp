#include "dpl/train/progress_display.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dpl/core/error.hpp"

namespace dpl::train {

namespace {
constexpr const char* kEraseBelow = "\033[J";
constexpr std::size_t kSpeedWindow = 10;

// Python's format(rate, "6.2%"): the width covers the number and the percent sign.
std::string percent(double rate) {
  char num[32];
  std::snprintf(num, sizeof num, "%.2f%%", rate * 100.0);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%6s", num);
  return buf;
}

std::string eta_text(double seconds) {
  if (!std::isfinite(seconds)) return "unknown";
  return format_timedelta(std::max(seconds, 0.0));
}
}  // namespace

std::string format_timedelta(double seconds) {
  DPL_CHECK(std::isfinite(seconds) && seconds >= 0, "format_timedelta: expected a finite number of seconds >= 0, got ",
            seconds);
  // timedelta keeps whole microseconds, rounding half to even as Python does.
  const auto total_us = static_cast<long long>(std::nearbyint(seconds * 1e6));
  const long long us = total_us % 1000000;
  const long long total_s = total_us / 1000000;
  const long long days = total_s / 86400;
  const long long rem = total_s % 86400;
  char buf[96];
  std::string out;
  if (days > 0) {
    std::snprintf(buf, sizeof buf, "%lld day%s, ", days, days == 1 ? "" : "s");
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", rem / 3600, (rem / 60) % 60, rem % 60);
  out += buf;
  if (us != 0) {
    std::snprintf(buf, sizeof buf, ".%06lld", us);
    out += buf;
  }
  return out;
}

ProgressDisplay::ProgressDisplay(std::int64_t training_length, LengthUnit unit, std::ostream& out, ProgressBarOptions options)
    : length_(training_length),
      unit_(unit),
      out_(out),
      options_(options),
      terminal_(resolve_mode(options.mode, out) == OutputMode::kTerminal),
      clock_start_(std::chrono::steady_clock::now()) {
  DPL_CHECK(training_length >= 1, "ProgressDisplay: expected a training length >= 1, got ", training_length);
  DPL_CHECK(options.update_interval >= 1, "ProgressDisplay: expected update_interval >= 1, got ",
            options.update_interval);
  DPL_CHECK(options.bar_length >= 1, "ProgressDisplay: expected bar_length >= 1, got ", options.bar_length);
}

ProgressDisplay::~ProgressDisplay() {
  try {
    close();
  } catch (...) {
    // A failing stream must not turn stack unwinding into std::terminate.
  }
}

void ProgressDisplay::close() {
  if (closed_) return;
  closed_ = true;
  if (terminal_ && drawn_) {
    out_ << kEraseBelow;
    out_.flush();
  }
}

std::string ProgressDisplay::bar(double rate) const {
  const int n = options_.bar_length;
  const int marks = std::clamp(static_cast<int>(rate * n), 0, n);
  return "[" + std::string(static_cast<std::size_t>(marks), '#') + std::string(static_cast<std::size_t>(n - marks), '.') +
         "]";
}

std::string ProgressDisplay::status(std::int64_t iteration, double epoch_detail) const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%10lld iter, %lld epoch / %lld %ss", static_cast<long long>(iteration),
                static_cast<long long>(std::floor(epoch_detail)), static_cast<long long>(length_),
                unit_ == LengthUnit::kEpoch ? "epoch" : "iteration");
  return buf;
}

std::vector<std::string> ProgressDisplay::block_lines(std::int64_t iteration, double epoch_detail, double iters_per_sec,
                                                  double seconds_left) const {
  const double done = unit_ == LengthUnit::kEpoch ? epoch_detail : static_cast<double>(iteration);
  const double rate = std::min(done / static_cast<double>(length_), 1.0);
  const double epoch_rate = epoch_detail - std::floor(epoch_detail);
  std::vector<std::string> lines;
  lines.push_back("     total " + bar(rate) + " " + percent(rate));
  lines.push_back("this epoch " + bar(epoch_rate) + " " + percent(epoch_rate));
  lines.push_back(status(iteration, epoch_detail));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%10.5g", iters_per_sec);
  lines.push_back(std::string(buf) + " iters/sec. Estimated time to finish: " + eta_text(seconds_left) + ".");
  return lines;
}

std::string ProgressDisplay::plain_line(std::int64_t iteration, double epoch_detail, double iters_per_sec,
                                    double seconds_left) const {
  const double done = unit_ == LengthUnit::kEpoch ? epoch_detail : static_cast<double>(iteration);
  const double rate = std::min(done / static_cast<double>(length_), 1.0);
  const double epoch_rate = epoch_detail - std::floor(epoch_detail);
  std::string s = status(iteration, epoch_detail);
  s.erase(0, s.find_first_not_of(' '));
  char num[32];
  std::snprintf(num, sizeof num, "%.2f%%", rate * 100.0);
  s += std::string(", total ") + num;
  std::snprintf(num, sizeof num, "%.2f%%", epoch_rate * 100.0);
  s += std::string(", this epoch ") + num;
  std::snprintf(num, sizeof num, "%.5g", iters_per_sec);
  s += std::string(", ") + num + " iters/sec, estimated time to finish: " + eta_text(seconds_left);
  return s;
}

void ProgressDisplay::update(std::int64_t iteration, double epoch_detail) {
  update(iteration, epoch_detail,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start_).count());
}

void ProgressDisplay::update(std::int64_t iteration, double epoch_detail, double now_seconds) {
  if (closed_) return;
  // The first call is the reference point for the speed, so the first drawing already has one.
  if (recent_.empty()) {
    recent_.push_back({iteration, epoch_detail, now_seconds});
    last_plain_ = now_seconds;
  }
  if (iteration % options_.update_interval != 0) return;

  recent_.push_back({iteration, epoch_detail, now_seconds});
  if (recent_.size() > kSpeedWindow + 1) recent_.pop_front();
  const Sample& old = recent_.front();
  const double span = now_seconds - old.seconds;
  const double inf = HUGE_VAL;
  const double speed_t = span > 0 ? static_cast<double>(iteration - old.iteration) / span : inf;
  const double speed_e = span > 0 ? (epoch_detail - old.epoch_detail) / span : inf;
  double left = unit_ == LengthUnit::kEpoch ? (static_cast<double>(length_) - epoch_detail) / speed_e
                                            : static_cast<double>(length_ - iteration) / speed_t;
  if (std::isnan(left)) left = HUGE_VAL;  // no progress measured yet
  left = std::max(left, 0.0);

  if (terminal_) {
    out_ << kEraseBelow;
    const std::vector<std::string> lines = block_lines(iteration, epoch_detail, speed_t, left);
    for (const std::string& l : lines) out_ << l << '\n';
    // Back to the top of the block, so that the next drawing (or a report row) overwrites it.
    out_ << "\033[" << lines.size() << 'A';
    out_.flush();
    drawn_ = true;
    return;
  }
  if (now_seconds - last_plain_ < options_.plain_interval_seconds) return;
  last_plain_ = now_seconds;
  out_ << plain_line(iteration, epoch_detail, speed_t, left) << '\n';
  out_.flush();
}

}  // namespace dpl::train
