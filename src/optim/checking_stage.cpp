#include "optim/checking_stage.hpp"

#include <string>

#include "dpl/core/error.hpp"
#include "optim/non_finite.hpp"

namespace dpl::optim {

Variable CheckingStage::update(const std::function<Variable(int)>& loss_fn, int micro_batches) {
  DPL_CHECK(!replay_ || micro_batches == 1, "Optimizer::update: a recorded step takes one micro-batch, got ",
            micro_batches);
  target().zero_grad();
  Variable loss = accumulate_gradients(loss_fn, micro_batches, [this](int, const Variable& l) { backward(l); });
  loss_ = loss.data();
  if (replay_) replay_loss_ = loss_;
  update();
  return loss;
}

nn::Module& CheckingStage::target() const {
  DPL_CHECK(target_ != nullptr, "Optimizer: call setup(model) before using the optimizer");
  return *target_;
}

void CheckingStage::reset_counters() {
  iteration_ = skipped_ = 0;
  last_skipped_ = prepared_ = false;
  finite_.reset();
}

void CheckingStage::drop_non_finite_flag() {
  flag_ = Tensor();
  finite_.reset();
}

Tensor& CheckingStage::adopt_non_finite_flag(const Tensor& flag, Device device) {
  DPL_CHECK(flag.defined() && flag.numel() == 1 && flag.dtype() == kFloat32 && flag.device() == device,
            "adopt_prepared_gradients: expected a one-element float32 flag on ", device, ", got ",
            flag.defined() ? detail::concat(flag.numel(), " elements of ", flag.dtype(), " on ", flag.device())
                           : std::string("an undefined tensor"));
  reset_non_finite_flag(device).copy_(flag);
  return flag_;
}

Tensor& CheckingStage::reset_non_finite_flag(Device device) {
  if (!flag_.defined() || flag_.device() != device) flag_ = Tensor::empty({1}, TensorOptions(kFloat32, device));
  flag_.fill_(0.0);
  finite_.reset();
  return flag_;
}

bool CheckingStage::gradients_finite() {
  if (!flag_.defined()) return true;
  // The step's one wait for the device, and only once: a MultiNodeOptimizer asks before the
  // wrapped optimizer's update() asks again.
  if (!finite_) finite_ = flag_.item() == 0.f;
  return *finite_;
}

bool CheckingStage::admit_step(const Tensor& grads) {
  ++iteration_;
  prepared_ = false;
  const bool finite = gradients_finite();
  finite_.reset();
  const Tensor loss = loss_;
  loss_ = Tensor();
  last_skipped_ = !finite;
  if (finite) return true;
  if (stops_on_non_finite()) {
    DPL_FAIL(non_finite_message(iteration_, first_non_finite_parameter(target(), grads), "",
                                non_finite::loss_words(loss)));
  }
  ++skipped_;
  return false;
}

}  // namespace dpl::optim
