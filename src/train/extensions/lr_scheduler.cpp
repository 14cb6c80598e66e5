#include "dpl/train/extensions/lr_scheduler.hpp"

#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

LrScheduler::LrScheduler(std::shared_ptr<const optim::LrSchedule> schedule) : schedule_(std::move(schedule)) {
  DPL_CHECK(schedule_ != nullptr, "LrScheduler: expected a schedule, got null");
}

void LrScheduler::before_update(Trainer& trainer) {
  optim::Optimizer& opt = trainer.updater().optimizer();
  schedule_->apply(opt, opt.t());
  trainer.observation().observe("lr", static_cast<double>(opt.lr()));
}

}  // namespace dpl::train::extensions
