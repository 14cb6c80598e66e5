#include "dpl/optim/optimizer.hpp"

#include <cmath>

#include "optim/update_rule.hpp"

namespace dpl::optim {

using detail::check_lr;
using detail::source_of;
using detail::zeros_like;

Adam::Adam(float alpha, float beta1, float beta2, float eps) : alpha_(alpha), beta1_(beta1), beta2_(beta2), eps_(eps) {
  check_lr("Adam", alpha);
  DPL_CHECK(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f,
            "Adam: expected beta1 and beta2 in [0, 1), got beta1=", beta1, " beta2=", beta2);
  DPL_CHECK(eps > 0.f, "Adam: expected eps > 0, got ", eps);
}
Adam::Adam(const AdamOptions& options)
    : Adam(options.lr(), options.betas().first, options.betas().second, options.eps()) {
  set_weight_decay(options.weight_decay());
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
std::vector<float> Adam::replay_values() const {
  // The bias correction of the step about to be taken (on_step_taken() counts it afterwards).
  const double t = static_cast<double>(moment_steps_ + 1);
  const double fix1 = 1.0 - std::pow(static_cast<double>(beta1_), t);
  const double fix2 = 1.0 - std::pow(static_cast<double>(beta2_), t);
  const auto lr_t = static_cast<float>(alpha_ * std::sqrt(fix2) / fix1);
  return {lr_t, beta1_, beta2_, eps_, weight_decay()};
}
void Adam::step(nn::ParameterArena& arena) {
  const std::vector<float> h = replay_values();
  Tensor p = arena.params();
  backend::adam_update(p, arena.grads(), m_, v_, {h[0], h[1], h[2], h[3], h[4]},
                       source_of(replay_mode(), replay_values_on_device(), replay_skip_flag()));
}

}  // namespace dpl::optim
