#pragma once
// Chainer's LogReport: the means of a trainer's observations, one log entry per trigger.

#include <memory>
#include <string>

#include "dpl/train/extension.hpp"
#include "dpl/train/training_log.hpp"

namespace dpl::train::extensions {

/// Chainer's LogReport: at each trigger the means of the observations become an entry of the log
/// written to <out>/log on rank 0. With several ranks, each value is the mean over all ranks of
/// each rank's mean (ChainerMN reports global values): "main/loss" is the loss of the whole
/// job's batches, not rank 0's. Collective: every rank keeps the same log (the one checkpoints
/// restore), and the ranks must observe the same keys (dpl::Error on every rank naming the ranks
/// that differ). Default trigger: every epoch, and at the end of a run whose last update ended
/// no entry (so a run shorter than an epoch still logs).
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
  Trigger default_trigger() const override { return Trigger::epochs(1).and_at_end(); }
  /// This rank's log (nullptr before initialize(), the first trigger or resume).
  TrainingLog* log() { return log_.get(); }
  /// This rank's log, created on first use (writing its file on rank 0 only).
  TrainingLog* log(Trainer& trainer);

 private:
  std::string filename_;
  std::unique_ptr<TrainingLog> log_;
};

}  // namespace dpl::train::extensions
