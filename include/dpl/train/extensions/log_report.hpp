#pragma once
// Chainer's LogReport: the means of a trainer's observations, one log entry per trigger.

#include <memory>
#include <string>

#include "dpl/train/extension.hpp"
#include "dpl/train/training_log.hpp"

namespace dpl::train::extensions {

/// Chainer's LogReport: at each trigger the means of the observations become an entry of the log
/// written to <out>/log on rank 0. Default trigger: every epoch.
class LogReport : public Extension {
 public:
  /// filename within the trainer's out folder.
  explicit LogReport(std::string filename = "log");
  std::string name() const override { return "LogReport"; }
  int priority() const override { return kPriorityWriter - 1; }  // after the evaluators
  /// True: rank 0 writes the log file into trainer.out() (when it is not empty).
  bool writes_output(const Trainer& /*trainer*/) const override { return true; }
  /// Starts rank 0's log, so its elapsed_time counts from the start of training.
  void initialize(Trainer& trainer) override { log(trainer); }
  void operator()(Trainer& trainer) override;
  /// Rank 0's log (nullptr on the other ranks and before the first trigger or resume).
  TrainingLog* log() { return log_.get(); }
  /// Rank 0's log, created on first use on rank 0.
  TrainingLog* log(Trainer& trainer);

 private:
  std::string filename_;
  std::unique_ptr<TrainingLog> log_;
};

}  // namespace dpl::train::extensions
