#pragma once
// MixedPrecisionStage: MixedPrecision's stage for a 16-bit model (float32 needs none): float32
// master weights in front of the wrapped pipeline, which runs on them with its check off.

#include <atomic>
#include <cstdint>
#include <memory>

#include "dpl/optim/mixed_precision.hpp"
#include "optim/checking_stage.hpp"

namespace dpl::optim {

class MixedPrecisionStage final : public CheckingStage {
 public:
  /// Requires dtype bfloat16 or float16 and checked scaling (MixedPrecision checks both).
  MixedPrecisionStage(DType dtype, LossScaling scaling) : dtype_(dtype), scaling_(scaling) {}

  void setup(nn::Module& model) override;
  using CheckingStage::update;
  void update() override;
  void backward(const Variable& loss) override { scale(loss).backward(); }
  std::vector<Tensor> prepare_gradients() override;
  GradientRanges gradient_ranges() override;
  std::vector<Tensor> adopt_prepared_gradients(const Tensor& flag) override;
  bool stops_on_non_finite() const override;
  void set_non_finite_policy(NonFinitePolicy policy) override;

  std::vector<std::pair<std::string, Tensor>> state() const override;
  std::vector<std::pair<std::string, Tensor>> gathered_state() override;
  std::map<std::string, double> state_scalars() const override;
  /// Keeps float32 master weights (and gradients) for the shard's elements only, and runs the
  /// wrapped pipeline on them, over the model's layout (its names, shapes and groups); an empty
  /// shard takes whole masters again, from the model's weights. Either way the wrapped state
  /// starts again from zero.
  void set_state_shard(const StateShard& shard) override;
  /// Under a shard, the float32 gradients of its elements (what the wrapped rule reads).
  Tensor shard_gradients() override;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, double>& scalars) override;

  std::string replay_refusal() const override;
  void set_replay_mode(bool on, const Tensor& skip_flag) override;
  void prepare_replay() override;
  void finish_replay() override;
  void count_replayed_step(bool taken) override;
  /// False: this stage reads the verdict itself, in finish_replay().
  bool can_defer_verdict() const override { return false; }

  Variable scale(const Variable& loss) const;
  double loss_scale() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }
  /// The float32 master weights and gradients: the model's arena layout, or under a shard its
  /// elements one after the other.
  const Tensor& master_params() const;
  const Tensor& master_grads() const;

 private:
  nn::ParameterArena& model_arena() const;
  nn::ParameterArena& master_arena() const;
  void cast_masters_into_model() const;
  // float16: the loss scale after a step that was taken (grows every growth_interval good steps)
  // or skipped for an overflow (backs off).
  void adjust_scale(bool step_taken);
  // (scale_, 1 / scale_) into device_scale_.
  void write_device_scale();
  // What prepare_gradients() fills: the master gradients, or under a shard a float32 buffer of
  // the whole arena's (the data-parallel stage reduce-scatters it into shard_grads_).
  Tensor prepared_gradients();
  bool sharded() const { return !shard_.empty(); }

  DType dtype_;
  LossScaling scaling_;
  std::unique_ptr<nn::Module> masters_;  // float32 copies of the parameters, in the model's order
  std::uint64_t model_arena_ = 0;        // id of the 16-bit arena the masters belong to
  double scale_ = 1.0;
  std::int64_t good_steps_ = 0;
  // float16 in replay mode: (scale, 1 / scale) as float32 on the model's device, which the
  // recorded loss scaling and unscaling read when they run; prepare_replay() writes this step's.
  Tensor device_scale_;
  // Set when gradient_ranges() filled some of the masters this step (possibly on another
  // thread); the next prepare_gradients() then only checks them.
  std::shared_ptr<std::atomic<bool>> ranges_prepared_ = std::make_shared<std::atomic<bool>>(false);
  Tensor range_flag_;  // gradient_ranges()' flag when the caller passes none
  // Sharded: the shard's ranges of the arena, its float32 master weights and gradients (its
  // elements one after the other; masters_ is then null), and the whole arena's float32
  // gradients as prepared, before the reduce-scatter.
  std::vector<ArenaRange> shard_;
  Tensor shard_params_, shard_grads_, staged_grads_;
};

}  // namespace dpl::optim
