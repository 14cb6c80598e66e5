#pragma once
// Gradient clipping by global norm, over the whole gradient arena at once.

#include <memory>

#include "dpl/nn/arena.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::optim {

/// The L2 norm of every gradient of arena taken together: one reduction over the gradient arena
/// (its zero padding adds nothing). Ensures the same value on every rank that holds the same
/// gradients, as all ranks do after the allreduce of a MultiNodeOptimizer.
double gradient_norm(const nn::ParameterArena& arena);

/// Scales every gradient by max_norm / norm when the global norm exceeds max_norm (one scale of
/// the whole arena), and leaves them alone otherwise. Returns the norm before clipping.
/// Requires a finite max_norm > 0; throws dpl::Error naming the value otherwise.
double clip_gradient_norm(nn::ParameterArena& arena, double max_norm);

/// A gradient hook that clips by global norm (as clip_gradient_norm does) and remembers the norm it
/// saw. The norm and the decision stay on the device, so a step with clipping never waits for the
/// GPU; reading last_norm() does.
class GradientClipping {
 public:
  /// Requires a finite max_norm > 0; throws dpl::Error naming the value otherwise.
  explicit GradientClipping(double max_norm);
  /// Clips arena's gradients; records the norm before clipping (on the arena's device).
  void operator()(nn::ParameterArena& arena);
  /// The same under sharded optimizer state: the norm of every rank's shard together (each
  /// rank's sum of squares, summed over the ranks: one allreduce of one float32), each rank
  /// clipping its own shard by it. Collective.
  void operator()(GradientShard& shard);
  /// The threshold.
  double max_norm() const { return max_norm_; }
  /// The norm before clipping at the last call (0 before the first, or for an empty arena); waits
  /// for that call's work on the device.
  double last_norm() const;

 private:
  double max_norm_;
  Tensor sum_squares_;  // the last call's sum of squared gradients, one float32 on the arena's device
};

/// Adds clipping by global norm to optimizer (to the wrapped optimizer of a MultiNodeOptimizer,
/// so after the allreduce and inside its optimize phase) and returns the hook, whose last_norm()
/// reports the norm of each update; with its sharded form, so that it also clips under sharded
/// optimizer state (the same norm on every rank). Requires a finite max_norm > 0.
std::shared_ptr<GradientClipping> clip_gradients(Optimizer& optimizer, double max_norm);

}  // namespace dpl::optim
