#include "dpl/train/training_log.hpp"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/atomic_file.hpp"
#include "dpl/core/error.hpp"

namespace dpl::train {

std::optional<double> LogEntry::get(const std::string& key) const {
  if (key == "epoch") return static_cast<double>(epoch);
  if (key == "iteration") return static_cast<double>(iteration);
  if (key == "elapsed_time") return elapsed_time;
  for (const auto& [k, v] : values) {
    if (k == key) return v;
  }
  return std::nullopt;
}

TrainingLog::TrainingLog(std::string out_dir, std::string filename)
    : out_dir_(std::move(out_dir)), filename_(std::move(filename)), start_(std::chrono::steady_clock::now()) {}

double TrainingLog::elapsed_time() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void TrainingLog::observe(const std::string& key, double value) {
  for (Pending& a : current_) {
    if (a.key == key) {
      a.sum += value;
      ++a.count;
      return;
    }
  }
  current_.push_back({key, value, 1});
}

const LogEntry& TrainingLog::end_epoch(std::int64_t epoch, std::int64_t iteration,
                                     const std::vector<std::pair<std::string, double>>& extra,
                                     std::optional<double> elapsed_time) {
  LogEntry e;
  e.epoch = epoch;
  e.iteration = iteration;
  e.elapsed_time = elapsed_time ? *elapsed_time : this->elapsed_time();
  for (const Pending& a : current_) e.values.emplace_back(a.key, a.sum / static_cast<double>(a.count));
  for (const auto& [key, value] : extra) {
    bool replaced = false;
    for (auto& kv : e.values) {
      if (kv.first == key) {
        kv.second = value;
        replaced = true;
      }
    }
    if (!replaced) e.values.emplace_back(key, value);
  }
  current_.clear();
  log_.push_back(std::move(e));
  write();
  return log_.back();
}

void TrainingLog::restore(std::vector<LogEntry> log, std::vector<Pending> pending, double elapsed_seconds) {
  // The clock counts nanoseconds in 64 bits (292 years); a longer time would not convert.
  constexpr double kMaxSeconds = 1e9;
  DPL_CHECK(std::isfinite(elapsed_seconds) && elapsed_seconds >= 0.0 && elapsed_seconds <= kMaxSeconds,
            "TrainingLog::restore: expected a finite elapsed time in [0, 1e9] seconds, got ", elapsed_seconds);
  for (const Pending& p : pending)
    DPL_CHECK(p.count >= 1, "TrainingLog::restore: expected a count >= 1 for '", p.key, "', got ", p.count);
  log_ = std::move(log);
  current_ = std::move(pending);
  start_ = std::chrono::steady_clock::now() -
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(elapsed_seconds));
  write();
}

std::string TrainingLog::path() const {
  if (out_dir_.empty()) return "";
  return (std::filesystem::path(out_dir_) / filename_).string();
}

std::string TrainingLog::to_json() const {
  // ordered_json keeps Chainer's key order (values, then epoch, iteration, elapsed_time).
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const LogEntry& e : log_) {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (const auto& [k, v] : e.values) obj[k] = v;
    obj["epoch"] = e.epoch;
    obj["iteration"] = e.iteration;
    obj["elapsed_time"] = e.elapsed_time;
    arr.push_back(std::move(obj));
  }
  return arr.dump(4);
}

void TrainingLog::write() const {
  if (out_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(out_dir_, ec);
  DPL_CHECK(!ec, "TrainingLog: cannot create the output folder ", out_dir_, ": ", ec.message());
  detail::write_file_atomically((std::filesystem::path(out_dir_) / filename_).string(), to_json() + "\n", "TrainingLog");
}

}  // namespace dpl::train
