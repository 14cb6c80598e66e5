#include "dpl/optim/clipping.hpp"

#include <cmath>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/error.hpp"

namespace dpl::optim {

namespace {
void check_max_norm(double max_norm) {
  DPL_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "clip_gradient_norm: expected a finite max_norm > 0, got ",
            max_norm);
}
}  // namespace

double gradient_norm(const nn::ParameterArena& arena) {
  if (arena.numel() == 0) return 0.0;
  NoGradGuard no_grad;
  const Variable g(arena.grads());
  return std::sqrt(static_cast<double>(sum(g * g).item()));
}

double clip_gradient_norm(nn::ParameterArena& arena, double max_norm) {
  check_max_norm(max_norm);
  const double norm = gradient_norm(arena);
  if (norm <= max_norm) return norm;
  NoGradGuard no_grad;
  Tensor grads = arena.grads();
  const Tensor scale = Tensor::full({}, max_norm / norm, TensorOptions(grads.dtype(), grads.device()));
  grads.copy_(mul(Variable(grads), Variable(scale)).data());
  return norm;
}

GradientClipping::GradientClipping(double max_norm) : max_norm_(max_norm) { check_max_norm(max_norm); }

void GradientClipping::operator()(nn::ParameterArena& arena) { last_norm_ = clip_gradient_norm(arena, max_norm_); }

std::shared_ptr<GradientClipping> clip_gradients(Optimizer& optimizer, double max_norm) {
  auto clipping = std::make_shared<GradientClipping>(max_norm);
  optimizer.add_gradient_hook([clipping](nn::ParameterArena& arena) { (*clipping)(arena); });
  return clipping;
}

}  // namespace dpl::optim
