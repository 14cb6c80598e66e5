#include "dpl/optim/clipping.hpp"

#include <cmath>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/tensor_ops.hpp"

namespace dpl::optim {

namespace {
void check_max_norm(double max_norm) {
  DPL_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "clip_gradient_norm: expected a finite max_norm > 0, got ",
            max_norm);
}
}  // namespace

double gradient_norm(const nn::ParameterArena& arena) {
  if (arena.numel() == 0) return 0.0;
  Tensor sum_squares = Tensor::empty({}, TensorOptions(kFloat32, arena.grads().device()));
  backend::sum_squares(arena.grads(), sum_squares);
  return std::sqrt(static_cast<double>(sum_squares.item()));
}

double clip_gradient_norm(nn::ParameterArena& arena, double max_norm) {
  GradientClipping clipping(max_norm);
  clipping(arena);
  return clipping.last_norm();
}

GradientClipping::GradientClipping(double max_norm) : max_norm_(max_norm) { check_max_norm(max_norm); }

// The norm stays on the device and the scale is decided there: a step that clips never waits for
// the device (which would leave it idle while the host queues the rest of the step).
void GradientClipping::operator()(nn::ParameterArena& arena) {
  if (arena.numel() == 0) {
    sum_squares_ = Tensor();
    return;
  }
  Tensor grads = arena.grads();
  if (!sum_squares_.defined() || sum_squares_.device() != grads.device())
    sum_squares_ = Tensor::empty({}, TensorOptions(kFloat32, grads.device()));
  backend::sum_squares(grads, sum_squares_);
  backend::clip_to_norm(grads, sum_squares_, static_cast<float>(max_norm_));
}

void GradientClipping::operator()(GradientShard& shard) {
  if (shard.grads.empty()) {
    sum_squares_ = Tensor();
    return;
  }
  const Device device = shard.grads.front().device();
  Tensor total;
  for (const Tensor& piece : shard.grads) {
    Tensor part = Tensor::empty({}, TensorOptions(kFloat32, device));
    backend::sum_squares(piece, part);
    total = total.defined() ? total + part : part;
  }
  // A one-element buffer for the collective; its sum is the whole arena's sum of squares.
  Tensor sum = total.reshape({1}).contiguous();
  shard.sum_over_ranks(sum);
  sum_squares_ = sum.reshape({});
  for (Tensor& piece : shard.grads) backend::clip_to_norm(piece, sum_squares_, static_cast<float>(max_norm_));
}

double GradientClipping::last_norm() const {
  return sum_squares_.defined() ? std::sqrt(static_cast<double>(sum_squares_.item())) : 0.0;
}

std::shared_ptr<GradientClipping> clip_gradients(Optimizer& optimizer, double max_norm) {
  auto clipping = std::make_shared<GradientClipping>(max_norm);
  optimizer.add_gradient_hook([clipping](nn::ParameterArena& arena) { (*clipping)(arena); }, /*device_only=*/true,
                              [clipping](GradientShard& shard) { (*clipping)(shard); });
  return clipping;
}

}  // namespace dpl::optim
