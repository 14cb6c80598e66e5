#pragma once
// Chainer's ProgressBar: a trainer's progress drawn on rank 0.

#include <iostream>
#include <memory>
#include <string>

#include "dpl/train/extension.hpp"
#include "dpl/train/progress_display.hpp"

namespace dpl::train::extensions {

/// Chainer's ProgressBar on rank 0, over the trainer's length. Runs every iteration.
class ProgressBar : public Extension {
 public:
  /// Requires out to outlive the extension.
  explicit ProgressBar(ProgressBarOptions options = {}, std::ostream& out = std::cout);
  std::string name() const override { return "ProgressBar"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void operator()(Trainer& trainer) override;
  void finalize(Trainer& trainer) override;

 private:
  ProgressBarOptions options_;
  std::ostream& out_;
  std::unique_ptr<ProgressDisplay> bar_;
};

}  // namespace dpl::train::extensions
