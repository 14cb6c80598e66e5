#include "dpl/train/extensions/progress_bar.hpp"

#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

ProgressBar::ProgressBar(ProgressBarOptions options, std::ostream& out) : options_(options), out_(out) {}

void ProgressBar::operator()(Trainer& trainer) {
  if (!trainer.is_root()) return;
  if (!bar_) bar_ = std::make_unique<ProgressDisplay>(trainer.length(), trainer.unit(), out_, options_);
  const data::BatchSource& it = trainer.updater().iterator();
  bar_->update(it.iteration(), it.epoch_detail());
}

void ProgressBar::finalize(Trainer& /*trainer*/) {
  if (bar_) bar_->close();
}

}  // namespace dpl::train::extensions
