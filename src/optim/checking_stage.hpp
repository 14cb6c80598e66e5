#pragma once
// CheckingStage: a stage that decides, from a one-element flag raised while the gradients are
// prepared, whether a step goes ahead, and counts the steps. The rule's own stage (RuleStage)
// is one; so is MixedPrecisionStage, which checks the master gradients in the pass that fills
// them and runs the wrapped pipeline with its check off.

#include <cstdint>
#include <optional>

#include "dpl/optim/step_pipeline.hpp"

namespace dpl::optim {

class CheckingStage : public StepStage {
 public:
  using StepStage::update;
  /// zero_grad(); for each micro-batch, backward of its loss (scaled by 1 / micro_batches);
  /// update() of this stage.
  Variable update(const std::function<Variable(int)>& loss_fn, int micro_batches) override;
  nn::Module& target() const override;
  /// Whether setup() has bound a model.
  bool has_target() const { return target_ != nullptr; }
  bool gradients_finite() override;
  bool stops_on_non_finite() const override { return non_finite_ == NonFinitePolicy::kStop; }
  void set_non_finite_policy(NonFinitePolicy policy) override { non_finite_ = policy; }
  NonFinitePolicy non_finite_policy() const override { return non_finite_; }
  std::int64_t iteration() const override { return iteration_; }
  std::int64_t skipped_steps() const override { return skipped_; }
  bool last_step_skipped() const override { return last_skipped_; }

 protected:
  /// Forgets the last step's verdict and counts: setup()'s reset.
  void reset_counters();
  /// The flag prepare_gradients() raises (one float32 on device, zeroed): allocated once per device.
  Tensor& reset_non_finite_flag(Device device);
  /// No check this step: no flag, nothing read back.
  void drop_non_finite_flag();
  /// adopt_prepared_gradients(): this step's flag = `flag` (checked: one float32 on `device`).
  Tensor& adopt_non_finite_flag(const Tensor& flag, Device device);
  /// Counts this update as an iteration and decides from gradients_finite() whether its step
  /// goes ahead: true if so; false for a skipped step (counted); throws dpl::Error for kStop,
  /// naming the iteration, the first non-finite parameter of `grads` (the arena's layout) and the
  /// loss of update(loss_fn). Ends the step's use of the flag.
  bool admit_step(const Tensor& grads);

  nn::Module* target_ = nullptr;
  NonFinitePolicy non_finite_ = NonFinitePolicy::kStop;
  Tensor flag_;                 // the check's one-element float32 flag (undefined: no check this step)
  std::optional<bool> finite_;  // the flag as read back, once per step
  bool prepared_ = false;       // prepare_gradients() ran since the last update()
  Tensor loss_;                 // the loss of the update(loss_fn) under way, for messages
  Tensor replay_loss_;          // replay mode: the recorded step's loss, for the non-finite message
  std::int64_t iteration_ = 0;
  std::int64_t skipped_ = 0;
  bool last_skipped_ = false;
};

}  // namespace dpl::optim
