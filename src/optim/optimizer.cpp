#include "dpl/optim/optimizer.hpp"

#include <cmath>

#include "backend/kernels.hpp"

namespace dpl::optim {

namespace {
void check_lr(const char* who, float lr) {
  DPL_CHECK(std::isfinite(lr) && lr >= 0.f, who, ": expected a finite learning rate >= 0, got ", lr);
}
Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), TensorOptions(t.dtype(), t.device())); }
}  // namespace

void Optimizer::setup(nn::Module& model) {
  target_ = &model;
  t_ = 0;
  nn::ParameterArena& arena = model.arena();
  init_state(arena);
  state_arena_ = arena.id();
}

nn::Module& Optimizer::target() const {
  DPL_CHECK(target_ != nullptr, "Optimizer: call setup(model) before using the optimizer");
  return *target_;
}

void Optimizer::update() {
  nn::ParameterArena& arena = target().arena();
  // A changed parameter set invalidates the per-element state.
  if (arena.id() != state_arena_) {
    init_state(arena);
    state_arena_ = arena.id();
  }
  ++t_;
  step(arena);
}

Variable Optimizer::update(const std::function<Variable()>& loss_fn) {
  zero_grad();
  Variable loss = loss_fn();
  loss.backward();
  update();
  return loss;
}

void Optimizer::zero_grad() { target().zero_grad(); }

void Optimizer::set_weight_decay(float rate) {
  DPL_CHECK(std::isfinite(rate) && rate >= 0.f, "Optimizer::set_weight_decay: expected a finite rate >= 0, got ",
            rate);
  weight_decay_ = rate;
}

SGD::SGD(float lr) : lr_(lr) { check_lr("SGD", lr); }
void SGD::set_lr(float lr) {
  check_lr("SGD", lr);
  lr_ = lr;
}
void SGD::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  backend::sgd_update(p, arena.grads(), {lr_, weight_decay_});
}

MomentumSGD::MomentumSGD(float lr, float momentum) : lr_(lr), momentum_(momentum) {
  check_lr("MomentumSGD", lr);
  DPL_CHECK(momentum >= 0.f && momentum < 1.f, "MomentumSGD: expected momentum in [0, 1), got ", momentum);
}
void MomentumSGD::set_lr(float lr) {
  check_lr("MomentumSGD", lr);
  lr_ = lr;
}
void MomentumSGD::init_state(const nn::ParameterArena& arena) { velocity_ = zeros_like(arena.params()); }
void MomentumSGD::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  backend::momentum_update(p, arena.grads(), velocity_, {lr_, momentum_, weight_decay_});
}

Adam::Adam(float alpha, float beta1, float beta2, float eps) : alpha_(alpha), beta1_(beta1), beta2_(beta2), eps_(eps) {
  check_lr("Adam", alpha);
  DPL_CHECK(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f,
            "Adam: expected beta1 and beta2 in [0, 1), got beta1=", beta1, " beta2=", beta2);
  DPL_CHECK(eps > 0.f, "Adam: expected eps > 0, got ", eps);
}
void Adam::set_lr(float alpha) {
  check_lr("Adam", alpha);
  alpha_ = alpha;
}
void Adam::init_state(const nn::ParameterArena& arena) {
  m_ = zeros_like(arena.params());
  v_ = zeros_like(arena.params());
  moment_steps_ = 0;
}
void Adam::step(nn::ParameterArena& arena) {
  const double t = static_cast<double>(++moment_steps_);
  const double fix1 = 1.0 - std::pow(static_cast<double>(beta1_), t);
  const double fix2 = 1.0 - std::pow(static_cast<double>(beta2_), t);
  const auto lr_t = static_cast<float>(alpha_ * std::sqrt(fix2) / fix1);
  Tensor p = arena.params();
  backend::adam_update(p, arena.grads(), m_, v_, {lr_t, beta1_, beta2_, eps_, weight_decay_});
}

}  // namespace dpl::optim
