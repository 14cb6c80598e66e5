#pragma once
// RuleStage: the innermost stage of every optimizer's step pipeline. It applies the update rule
// (Optimizer::step) to the arena of the model it is set up on, after the non-finite check and
// the gradient hooks, and runs the rule in replay mode for a recorded step.

#include <cstdint>
#include <memory>
#include <vector>

#include "dpl/optim/optimizer.hpp"
#include "optim/checking_stage.hpp"

namespace dpl::backend {
class PendingRead;
}

namespace dpl::optim {

class RuleStage final : public CheckingStage {
 public:
  explicit RuleStage(Optimizer& rule) : rule_(rule) {}
  ~RuleStage() override;

  void setup(nn::Module& model) override;
  using CheckingStage::update;
  void update() override;
  void backward(const Variable& loss) override { loss.backward(); }
  std::vector<Tensor> prepare_gradients() override;
  GradientRanges gradient_ranges() override { return {}; }
  std::vector<Tensor> adopt_prepared_gradients(const Tensor& flag) override;

  std::vector<std::pair<std::string, Tensor>> state() const override { return rule_.own_state(); }
  /// The rule's state as it is (a shard of it when sharded): gathering is the sharding stage's.
  std::vector<std::pair<std::string, Tensor>> gathered_state() override { return state(); }
  /// Refuses a rule that is not elementwise, gradient hooks without a sharded form and replay
  /// mode (dpl::Error), then
  /// lays the state out again for the shard when set up.
  void set_state_shard(const StateShard& shard) override;
  /// Undefined: the shard's averaged gradients go back into the arena's own gradients.
  Tensor shard_gradients() override { return Tensor(); }
  std::map<std::string, double> state_scalars() const override;
  /// The parameter groups' settings among the state scalars (none without groups).
  std::map<std::string, double> group_scalars() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, double>& scalars) override;

  std::string replay_refusal() const override;
  void set_replay_mode(bool on, const Tensor& skip_flag) override;
  void prepare_replay() override;
  void finish_replay() override;
  void count_replayed_step(bool taken) override;
  bool can_defer_verdict() const override;
  /// See Optimizer::finish_replay_deferred (which checks can_defer_verdict() on the outermost stage).
  void finish_replay_deferred(const Tensor& loss);
  void settle_replay();
  bool verdict_pending() const { return pending_verdict_ != nullptr; }

  void add_gradient_hook(GradientHook hook, bool device_only, ShardedGradientHook sharded);
  std::size_t gradient_hook_count() const { return hooks_.size(); }
  const Tensor& replay_values_on_device() const { return replay_values_; }
  const Tensor& replay_skip_flag() const { return replay_skip_; }

 private:
  // Lays the rule's state out for the arena, unless it already is.
  void lay_out_state(nn::ParameterArena& arena);

  Optimizer& rule_;
  std::vector<GradientHook> hooks_;
  // Each hook's counterpart under sharded state (empty: none, which keeps sharding out); the
  // shard's sum over the ranks.
  std::vector<ShardedGradientHook> sharded_hooks_;
  std::function<void(Tensor&)> sum_over_ranks_;
  // The hooks run on the gradients the rule reads: the arena's, or under a shard its pieces.
  void run_hooks(nn::ParameterArena& arena);
  std::size_t host_hooks_ = 0;  // hooks that are not device-only: they keep replay mode out
  // The arena the state was laid out for; a repacked model gets fresh state.
  std::uint64_t state_arena_ = 0;
  Tensor replay_values_;  // replay mode: the step's values on the device
  Tensor replay_skip_;    // replay mode: the flag the update kernel skips on
  bool own_replay_flag_ = false;  // replay mode: replay_skip_ is this stage's own flag
  // finish_replay_deferred(): the last run's flag on its way to the host, and that run's loss.
  std::shared_ptr<backend::PendingRead> pending_verdict_;
  Tensor pending_loss_;
};

}  // namespace dpl::optim
