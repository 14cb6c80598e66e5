#include "dpl/optim/optimizer.hpp"

#include "optim/update_rule.hpp"

namespace dpl::optim {

using detail::check_lr;
using detail::source_of;

SGD::SGD(float lr) : lr_(lr) { check_lr("SGD", lr); }
SGD::SGD(const SGDOptions& options) : SGD(options.lr()) { set_weight_decay(options.weight_decay()); }
void SGD::set_lr(float lr) {
  check_lr("SGD", lr);
  lr_ = lr;
}
void SGD::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena))
    backend::sgd_update(s.param, s.grad, {s.values[0], s.values[1]},
                        source_of(replay_mode(), s.device_values, replay_skip_flag()));
}
std::vector<float> SGD::step_values(float lr, float weight_decay) const { return {lr, weight_decay}; }

MomentumSGD::MomentumSGD(float lr, float momentum) : lr_(lr), momentum_(momentum) {
  check_lr("MomentumSGD", lr);
  DPL_CHECK(momentum >= 0.f && momentum < 1.f, "MomentumSGD: expected momentum in [0, 1), got ", momentum);
}
MomentumSGD::MomentumSGD(const MomentumSGDOptions& options) : MomentumSGD(options.lr(), options.momentum()) {
  set_weight_decay(options.weight_decay());
}
void MomentumSGD::set_lr(float lr) {
  check_lr("MomentumSGD", lr);
  lr_ = lr;
}
void MomentumSGD::init_state(const nn::ParameterArena& arena) { velocity_ = state_zeros(arena); }
void MomentumSGD::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena)) {
    Tensor velocity = s.state(velocity_);
    backend::momentum_update(s.param, s.grad, velocity, {s.values[0], s.values[1], s.values[2]},
                             source_of(replay_mode(), s.device_values, replay_skip_flag()));
  }
}
std::vector<float> MomentumSGD::step_values(float lr, float weight_decay) const {
  return {lr, momentum_, weight_decay};
}

}  // namespace dpl::optim
