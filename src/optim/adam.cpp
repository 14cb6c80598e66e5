#include "dpl/optim/optimizer.hpp"

#include <cmath>

#include "optim/update_rule.hpp"

namespace dpl::optim {

using detail::check_lr;
using detail::source_of;

MomentOptimizer::MomentOptimizer(const char* who, float lr, float beta1, float beta2, float eps)
    : who_(who), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
  check_lr(who, lr);
  DPL_CHECK(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f, who,
            ": expected beta1 and beta2 in [0, 1), got beta1=", beta1, " beta2=", beta2);
  DPL_CHECK(eps > 0.f, who, ": expected eps > 0, got ", eps);
}
void MomentOptimizer::init_state(const nn::ParameterArena& arena) {
  m_ = state_zeros(arena);
  v_ = state_zeros(arena);
  moment_steps_ = 0;
}
double MomentOptimizer::bias_correction(float beta) const {
  return 1.0 - std::pow(static_cast<double>(beta), static_cast<double>(moment_steps_ + 1));
}

void MomentOptimizer::set_lr(float lr) {
  check_lr(who_, lr);
  lr_ = lr;
}

Adam::Adam(float alpha, float beta1, float beta2, float eps) : MomentOptimizer("Adam", alpha, beta1, beta2, eps) {}
Adam::Adam(const AdamOptions& options)
    : Adam(options.lr(), options.betas().first, options.betas().second, options.eps()) {
  set_weight_decay(options.weight_decay());
}
std::vector<float> Adam::step_values(float lr, float weight_decay) const {
  const double fix1 = bias_correction(beta1()), fix2 = bias_correction(beta2());
  const auto lr_t = static_cast<float>(lr * std::sqrt(fix2) / fix1);
  return {lr_t, beta1(), beta2(), eps(), weight_decay};
}
void Adam::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena)) {
    Tensor m = s.state(m_), v = s.state(v_);
    const std::vector<float>& h = s.values;
    backend::adam_update(s.param, s.grad, m, v, {h[0], h[1], h[2], h[3], h[4]},
                         source_of(replay_mode(), s.device_values, replay_skip_flag()));
  }
}

}  // namespace dpl::optim
