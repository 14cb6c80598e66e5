#pragma once
// The phase summary of a data-parallel run, printed and written when training ends.

#include <cstdint>
#include <iostream>
#include <string>

#include "dpl/train/extension.hpp"

namespace dpl::train::extensions {

/// At the end of training: the phase summary of a parallel::MultiNodeOptimizer across ranks
/// (collective), printed on rank 0 with the training throughput (and peak GPU memory on a GPU),
/// and written to <out>/phase_summary.json: profile::to_json's fields plus "communicator",
/// "nodes", "timing", "threads_per_process", "training_iterations", "training_seconds" and
/// "data_seconds" (rank 0's), what a scaling profile needs. With another optimizer, only the
/// throughput. The optimizer is the one the updater was given as a MultiNodeOptimizer
/// (StandardUpdater::multi_node_optimizer()).
class PhaseSummary : public Extension {
 public:
  /// skip_warmup iterations are left out of the summary. Requires out to outlive the extension.
  explicit PhaseSummary(std::int64_t skip_warmup = 1, std::ostream& out = std::cout);
  std::string name() const override { return "PhaseSummary"; }
  Trigger default_trigger() const override { return Trigger::end(); }
  /// True when the trainer's updater was given a parallel::MultiNodeOptimizer: then rank 0
  /// writes phase_summary.json into trainer.out() (when it is not empty).
  bool writes_output(const Trainer& trainer) const override;
  void operator()(Trainer& trainer) override;

 private:
  std::int64_t skip_warmup_;
  std::ostream& out_;
};

}  // namespace dpl::train::extensions
