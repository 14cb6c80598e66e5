#include "dpl/train/extensions/log_report.hpp"

#include <utility>

#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

LogReport::LogReport(std::string filename) : filename_(std::move(filename)) {}

TrainingLog* LogReport::log(Trainer& trainer) {
  if (!log_ && trainer.is_root()) log_ = std::make_unique<TrainingLog>(trainer.out(), filename_);
  return log_.get();
}

void LogReport::operator()(Trainer& trainer) {
  // Every rank takes the means, so every rank's sums restart alike; rank 0 keeps the log.
  const auto means = trainer.observation().take_means();
  TrainingLog* log = this->log(trainer);
  if (log == nullptr) return;
  for (const auto& [key, value] : means) log->observe(key, value);
  const data::BatchSource& it = trainer.updater().iterator();
  log->end_epoch(it.epoch(), it.iteration());
}

}  // namespace dpl::train::extensions
