#pragma once
// Chainer's PrintReport: a trainer's log entries printed as a table on rank 0.

#include <cstddef>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dpl/train/extension.hpp"
#include "dpl/train/report_table.hpp"

namespace dpl::train::extensions {

/// Chainer's PrintReport: prints the LogReport's new entries as a table on rank 0.
class PrintReport : public Extension {
 public:
  /// Requires out to outlive the extension; a LogReport extension in the trainer when it runs.
  explicit PrintReport(std::vector<std::string> entries = ReportTable::default_entries(),
                       std::ostream& out = std::cout);
  /// Every epoch, and at the end of a run whose last update did not fire it (as LogReport's).
  Trigger default_trigger() const override { return Trigger::epochs(1).and_at_end(); }
  std::string name() const override { return "PrintReport"; }
  void operator()(Trainer& trainer) override;
  void resumed(Trainer& trainer) override;

 private:
  std::vector<std::string> entries_;
  std::ostream& out_;
  std::unique_ptr<ReportTable> report_;
  std::size_t printed_ = 0;
};

}  // namespace dpl::train::extensions
