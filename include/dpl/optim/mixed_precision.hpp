#pragma once
// Mixed precision: a model that computes in bfloat16 or float16 and is trained through float32
// master weights and float32 optimizer state, switched on by wrapping its optimizer.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/core/dtype.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::optim {

/// Dynamic loss scaling, used with float16 only: PyTorch GradScaler's policy and defaults. The
/// loss is multiplied by the scale before backward, so that small gradients survive float16; a
/// step whose gradients overflowed (an Inf or NaN anywhere) is skipped and the scale backs off;
/// after growth_interval good steps in a row it grows.
struct LossScaling {
  /// The scale of the first step (2^16).
  double init_scale = 65536.0;
  /// The scale is multiplied by this after growth_interval good steps in a row.
  double growth_factor = 2.0;
  /// The scale is multiplied by this after a step that overflowed.
  double backoff_factor = 0.5;
  /// Good steps in a row before the scale grows.
  std::int64_t growth_interval = 2000;
};

class MixedPrecisionStage;

/// Decorates an optimizer so that the model computes in `dtype` while the optimizer works in
/// float32, as PyTorch's autocast with GradScaler does, but with the model's own parameters cast:
///
///  - setup(model) keeps a float32 copy of every parameter (the master weights, in an arena of
///    the model's layout), casts the model's parameters to dtype (one arena, which forward and
///    backward use), and sets the wrapped optimizer up on the masters, so that its state (moments,
///    velocities) is float32 too. Buffers (BatchNorm's running statistics) are left as they are:
///    float32.
///  - each step, prepare_gradients() turns the 16-bit gradients into float32 master gradients in
///    one pass (float16: divided by the loss scale, and checked for Inf and NaN in the same pass);
///    update() then runs the wrapped optimizer on the masters (its gradient hooks, such as
///    clipping, see the master gradients, unscaled) and casts the masters back into the model's
///    parameters in one pass, so that after every step each parameter equals its master rounded
///    to dtype.
///  - float16 only: backward(loss) multiplies the loss by loss_scale() first, and a step whose
///    gradients overflowed changes nothing (no parameter, no moment, t() not advanced) but the
///    scale (see LossScaling). Reading the overflow flag is the one wait on the GPU per step;
///    bfloat16, with float32's exponent range, needs no scaling and never waits. In a recorded
///    step (train::CapturedStep, replay mode) the scale is kept on the device as well: each
///    replay multiplies the loss and divides the gradients by the scale written just before it,
///    and the scale changes on the host after the step as in ordinary steps.
///  - dtype float32 is a pass-through to the wrapped optimizer, so that a program can choose its
///    precision in one place.
///
/// Under data parallelism, wrap this in the parallel::MultiNodeOptimizer (not the other way
/// round): it averages the float32 master gradients, carried in the communicator's
/// CommOptions::allreduce_dtype, and the overflow flag, so that every rank skips the same steps.
/// With sharded optimizer state (MultiNodeOptimizer::set_zero_stage) each rank keeps the masters
/// and the wrapped optimizer's state for its shard of the arena only.
///
/// A model whose parameters change after setup() (a parameter added, data replaced) needs
/// setup() again: update() throws until then.
class MixedPrecision : public OptimizerWrapper {
 public:
  /// Requires a non-null actual, dtype float32, bfloat16 or float16, and (float16) scaling with a
  /// finite init_scale > 0, growth_factor > 1, backoff_factor in (0, 1) and growth_interval >= 1.
  /// Throws dpl::Error naming the offending value otherwise. With a 16-bit dtype this adds its
  /// stage (the masters, the loss scale, the check in the pass that fills the master gradients)
  /// in front of actual's step pipeline and turns actual's own check off; float32 adds none.
  MixedPrecision(std::unique_ptr<Optimizer> actual, DType dtype, LossScaling scaling = {});
  ~MixedPrecision() override;

  /// loss multiplied by loss_scale() (float16), or loss itself. A float16 loss carries its
  /// gradient in float16, where 65536 is already Inf: such a run backs off to 2^15 at its first
  /// step; a float32 loss has the full range.
  Variable scale(const Variable& loss) const;
  /// The compute dtype.
  DType dtype() const { return dtype_; }
  /// The loss scale of the next step (1 without float16).
  double loss_scale() const;
  /// Good steps in a row since the scale last changed.
  std::int64_t good_steps() const;
  /// The float32 master weights and gradients, with the model's arena layout; under a
  /// parallel::MultiNodeOptimizer with sharded optimizer state (set_zero_stage), this rank's
  /// shard only (optim::Optimizer::state_shard()'s elements, one after the other). Requires
  /// setup() with a 16-bit dtype.
  const Tensor& master_params() const;
  const Tensor& master_grads() const;

 private:
  MixedPrecision(std::unique_ptr<Optimizer> actual, DType dtype, std::unique_ptr<MixedPrecisionStage> stage);
  const MixedPrecisionStage& masters() const;

  DType dtype_;
  MixedPrecisionStage* stage_;  // owned by OptimizerWrapper; null for float32
};

/// Wraps actual in a MixedPrecision computing in dtype: the one call that switches a program's
/// precision (wrap the result in parallel::create_multi_node_optimizer for data parallelism).
std::unique_ptr<MixedPrecision> mixed_precision(std::unique_ptr<Optimizer> actual, DType dtype,
                                                LossScaling scaling = {});

}  // namespace dpl::optim
