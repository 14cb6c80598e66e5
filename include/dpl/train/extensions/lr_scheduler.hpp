#pragma once
// A trainer's learning rate set from an optim::LrSchedule before every update.

#include <memory>
#include <string>
#include <type_traits>

#include "dpl/optim/schedule.hpp"
#include "dpl/train/extension.hpp"

namespace dpl::train::extensions {

/// Applies an optim::LrSchedule: sets the optimizer's learning rate from it before every update
/// (at the optimizer's t(), so a resumed run continues the schedule where it stopped), and
/// observes it as "lr".
class LrScheduler : public Extension {
 public:
  /// Requires a non-null schedule (dpl::Error otherwise).
  explicit LrScheduler(std::shared_ptr<const optim::LrSchedule> schedule);
  /// Copies any concrete schedule.
  template <typename S, typename = std::enable_if_t<std::is_base_of_v<optim::LrSchedule, S>>>
  explicit LrScheduler(const S& schedule) : LrScheduler(std::make_shared<const S>(schedule)) {}
  std::string name() const override { return "LrScheduler"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void before_update(Trainer& trainer) override;

 private:
  std::shared_ptr<const optim::LrSchedule> schedule_;
};

}  // namespace dpl::train::extensions
