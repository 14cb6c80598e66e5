#pragma once
// Mixed precision: a model that computes in bfloat16 or float16 and is trained through float32
// master weights and float32 optimizer state, switched on by wrapping its optimizer.

#include <atomic>
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
///    bfloat16, with float32's exponent range, needs no scaling and never waits.
///  - dtype float32 is a pass-through to the wrapped optimizer, so that a program can choose its
///    precision in one place.
///
/// Under data parallelism, wrap this in the parallel::MultiNodeOptimizer (not the other way
/// round): it averages the float32 master gradients, carried in the communicator's
/// CommOptions::allreduce_dtype, and the overflow flag, so that every rank skips the same steps.
///
/// A model whose parameters change after setup() (a parameter added, data replaced) needs
/// setup() again: update() throws until then.
class MixedPrecision : public Optimizer {
 public:
  /// Requires a non-null actual, dtype float32, bfloat16 or float16, and (float16) scaling with a
  /// finite init_scale > 0, growth_factor > 1, backoff_factor in (0, 1) and growth_interval >= 1.
  /// Throws dpl::Error naming the offending value otherwise.
  MixedPrecision(std::unique_ptr<Optimizer> actual, DType dtype, LossScaling scaling = {});

  /// Builds the float32 masters from the model's parameters (float32 ones are copied exactly),
  /// casts the parameters to dtype, sets the wrapped optimizer up on the masters and resets the
  /// loss scale to init_scale. Requires parameters of a float dtype on one device.
  void setup(nn::Module& model) override;
  /// One step (see the class comment); prepares the gradients first when prepare_gradients()
  /// has not run since the last update.
  void update() override;
  /// Optimizer's update(loss_fn): its backward(loss) is this class's, so the loss gets scaled
  /// (float32: the wrapped optimizer's update(loss_fn)).
  Variable update(const std::function<Variable()>& loss_fn) override;
  /// float16: scale(loss).backward(); otherwise loss.backward().
  void backward(const Variable& loss) override;
  /// The master gradients, filled from the model's gradients, and the flag raised in that same
  /// pass when any of them is Inf or NaN (float16: always, it is the overflow flag; bfloat16:
  /// unless the non-finite policy is kOff).
  std::vector<Tensor> prepare_gradients() override;
  /// The float32 master gradients, range by range (see Optimizer::gradient_ranges); dtype
  /// float32 passes the wrapped optimizer's through.
  GradientRanges gradient_ranges() override;
  /// See Optimizer::adopt_prepared_gradients: the masters as the ranges left them, with `flag`
  /// as the check's (for float16: the overflow check's) verdict.
  std::vector<Tensor> adopt_prepared_gradients(const Tensor& flag) override;
  bool gradients_finite() override;
  /// float16: false, a non-finite step is an overflow and is skipped, whatever the policy (the
  /// loss scale backs off); bfloat16: the policy's kStop; float32: the wrapped optimizer's.
  bool stops_on_non_finite() const override;
  /// The policy for bfloat16 (and, passed on, float32); float16 overflows skip under every
  /// policy. The wrapped optimizer runs on the already checked masters with the check off.
  void set_non_finite_policy(NonFinitePolicy policy) override;
  std::int64_t iteration() const override;

  float lr() const override { return actual_->lr(); }
  void set_lr(float lr) override { actual_->set_lr(lr); }
  float weight_decay() const override { return actual_->weight_decay(); }
  void set_weight_decay(float rate) override { actual_->set_weight_decay(rate); }
  /// Steps taken; skipped (overflowed) steps are not counted.
  std::int64_t t() const override { return actual_->t(); }
  /// The wrapped optimizer's state, and "master": the float32 master weights (arena layout).
  std::vector<std::pair<std::string, Tensor>> state() const override;
  /// The wrapped optimizer's scalars and, with float16, "loss_scale" and "loss_scale_good_steps"
  /// (good steps since the scale last changed), so that a resumed run continues with the same
  /// scale.
  std::map<std::string, double> state_scalars() const override;
  /// Restores what state() and state_scalars() exported, checking everything first (as
  /// Optimizer::load_state does), and casts the restored masters into the model's parameters.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, double>& scalars) override;
  /// Adds the hook to the wrapped optimizer: it runs on the float32 master gradients, unscaled.
  void add_gradient_hook(GradientHook hook) override { actual_->add_gradient_hook(std::move(hook)); }
  std::size_t gradient_hook_count() const override { return actual_->gradient_hook_count(); }

  /// Replay mode (Optimizer::set_replay_mode): float32 passes it to the wrapped optimizer;
  /// bfloat16 records the master-gradient pass, the wrapped optimizer's step (skipping on this
  /// optimizer's flag) and the cast into the model. float16 is refused: its loss scale changes on
  /// the host after each overflow or run of good steps.
  std::string replay_refusal() const override;
  void set_replay_mode(bool on, const Tensor& skip_flag = Tensor()) override;
  void prepare_replay() override;
  void finish_replay() override;
  void count_replayed_step(bool taken) override;
  /// False: this wrapper reads the verdict itself, in finish_replay().
  bool can_defer_verdict() const override { return false; }

  /// loss multiplied by loss_scale() (float16), or loss itself. A float16 loss carries its
  /// gradient in float16, where 65536 is already Inf: such a run backs off to 2^15 at its first
  /// step; a float32 loss has the full range.
  Variable scale(const Variable& loss) const;
  /// The compute dtype.
  DType dtype() const { return dtype_; }
  /// The loss scale of the next step (1 without float16).
  double loss_scale() const { return scale_; }
  /// Good steps in a row since the scale last changed.
  std::int64_t good_steps() const { return good_steps_; }
  /// Whether the last update() was skipped because its gradients overflowed (or, under kSkip,
  /// were not finite).
  bool last_step_skipped() const override;
  /// Steps skipped since setup().
  std::int64_t skipped_steps() const override;
  /// The float32 master weights and gradients, with the model's arena layout. Requires setup()
  /// with a 16-bit dtype.
  const Tensor& master_params() const;
  const Tensor& master_grads() const;
  /// The wrapped optimizer.
  Optimizer& actual() const { return *actual_; }

 protected:
  void step(nn::ParameterArena&) override {}

 private:
  nn::ParameterArena& model_arena() const;
  nn::ParameterArena& master_arena() const;
  void cast_masters_into_model() const;

  std::unique_ptr<Optimizer> actual_;
  DType dtype_;
  LossScaling scaling_;
  std::unique_ptr<nn::Module> masters_;  // float32 copies of the parameters, in the model's order
  std::uint64_t model_arena_ = 0;        // id of the 16-bit arena the masters belong to
  double scale_ = 1.0;
  std::int64_t good_steps_ = 0;
  // Set when gradient_ranges() filled some of the masters this step (possibly on another
  // thread); the next prepare_gradients() then only checks them.
  std::shared_ptr<std::atomic<bool>> ranges_prepared_ = std::make_shared<std::atomic<bool>>(false);
  Tensor range_flag_;  // gradient_ranges()' flag when the caller passes none
};

/// Wraps actual in a MixedPrecision computing in dtype: the one call that switches a program's
/// precision (wrap the result in parallel::create_multi_node_optimizer for data parallelism).
std::unique_ptr<MixedPrecision> mixed_precision(std::unique_ptr<Optimizer> actual, DType dtype,
                                                LossScaling scaling = {});

}  // namespace dpl::optim
