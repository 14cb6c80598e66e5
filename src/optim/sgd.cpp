#include "dpl/optim/optimizer.hpp"

#include "optim/update_rule.hpp"

namespace dpl::optim {

using detail::check_lr;
using detail::source_of;
using detail::zeros_like;

SGD::SGD(float lr) : lr_(lr) { check_lr("SGD", lr); }
SGD::SGD(const SGDOptions& options) : SGD(options.lr()) { set_weight_decay(options.weight_decay()); }
void SGD::set_lr(float lr) {
  check_lr("SGD", lr);
  lr_ = lr;
}
void SGD::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  backend::sgd_update(p, arena.grads(), {lr_, weight_decay()}, source_of(replay_mode(), replay_values_on_device(), replay_skip_flag()));
}
std::vector<float> SGD::replay_values() const { return {lr_, weight_decay()}; }

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
void MomentumSGD::init_state(const nn::ParameterArena& arena) { velocity_ = zeros_like(arena.params()); }
void MomentumSGD::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  backend::momentum_update(p, arena.grads(), velocity_, {lr_, momentum_, weight_decay()},
                           source_of(replay_mode(), replay_values_on_device(), replay_skip_flag()));
}
std::vector<float> MomentumSGD::replay_values() const { return {lr_, momentum_, weight_decay()}; }

}  // namespace dpl::optim
