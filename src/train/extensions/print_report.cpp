#include "dpl/train/extensions/print_report.hpp"

#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/train/extensions/log_report.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

PrintReport::PrintReport(std::vector<std::string> entries, std::ostream& out)
    : entries_(std::move(entries)), out_(out) {}

void PrintReport::operator()(Trainer& trainer) {
  if (!trainer.is_root()) return;
  auto* log_ext = trainer.find<LogReport>();
  DPL_CHECK(log_ext != nullptr, "PrintReport: the trainer has no LogReport extension to print");
  const TrainingLog* log = log_ext->log(trainer);
  if (!report_) {
    // Steps skipped for non-finite gradients show in the default table (as the share of the
    // period's steps), so a run that skips is seen to.
    std::vector<std::string> entries = entries_;
    if (entries == ReportTable::default_entries() &&
        trainer.updater().optimizer().non_finite_policy() == optim::NonFinitePolicy::kSkip)
      entries.insert(entries.end() - 1, "main/skipped_steps");
    report_ = std::make_unique<ReportTable>(out_, entries);
  }
  for (; printed_ < log->log().size(); ++printed_) report_->print(log->log()[printed_]);
}

void PrintReport::resumed(Trainer& trainer) {
  // The restored entries were printed by the run that made them.
  auto* log_ext = trainer.find<LogReport>();
  if (log_ext != nullptr && log_ext->log(trainer) != nullptr) printed_ = log_ext->log(trainer)->log().size();
}

}  // namespace dpl::train::extensions
