#pragma once
// The step pipeline: what wraps an optimizer's update rule (the non-finite check, replay of a
// recorded step, mixed precision's master weights, the data-parallel allreduce) as stages that
// the optimizers compose (see docs/architecture.md, "The step pipeline").

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::optim {

/// What an update does when the gradients it would apply hold an Inf or a NaN (see
/// docs/reliability.md). Every rank reaches the same verdict under a parallel::MultiNodeOptimizer.
enum class NonFinitePolicy {
  /// Throw dpl::Error on every rank, naming the iteration, the rank(s) whose gradients were
  /// non-finite, the first such parameter and whether the loss was finite. The default.
  kStop,
  /// Skip the step on every rank: parameters, optimizer state and t() stay as they were, and
  /// skipped_steps() counts it.
  kSkip,
  /// No check: no pass over the gradients and no read of a flag (the step applies what it gets).
  kOff,
};

/// "stop", "skip" or "off".
const char* to_string(NonFinitePolicy policy);

/// The name of the parameter of model whose gradient holds the first Inf or NaN of grads (a
/// buffer in the layout of model's arena, any float dtype and device), or an empty string when
/// grads is finite. Copies grads to the host: for a stage's failure path only.
std::string first_non_finite_parameter(nn::Module& model, const Tensor& grads);

/// The message every stopping rank throws: "iteration N: non-finite gradient (Inf or NaN) of
/// parameter 'P'<where>; <loss>", then what was expected and how to skip instead. `where` is
/// " on rank(s) 1, 2" or empty for one process; `loss` says what the loss was; `unlocated` says
/// why no parameter is named when `parameter` is empty.
std::string non_finite_message(std::int64_t iteration, const std::string& parameter, const std::string& where,
                               const std::string& loss,
                               const std::string& unlocated = "not located in the averaged gradients");

/// A transform of the gradients between their completion and the step: it reads and may change
/// arena.grads() in place (the parameters' gradients are views of it). Under a
/// parallel::MultiNodeOptimizer the gradients it sees are already averaged over the ranks.
using GradientHook = std::function<void(nn::ParameterArena& arena)>;

/// Elements [begin, begin + numel) of a parameter arena: one piece of the part of it whose
/// optimizer state a rank keeps under sharded optimizer state (ZeRO; see
/// parallel::MultiNodeOptimizer::set_zero_stage).
struct ArenaRange {
  std::int64_t begin = 0, numel = 0;
};

/// The part of the arena a pipeline updates and keeps per-element state for under sharded
/// optimizer state.
struct StateShard {
  /// Non-empty ranges in arena order, not overlapping; the per-element state holds their
  /// elements one after the other. Empty: the whole arena (unsharded).
  std::vector<ArenaRange> ranges;
  /// Where the rule reads the shard's gradients and updates its parameters, laid out as the
  /// state (optim::MixedPrecision's float32 master weights of the shard, and the gradients the
  /// shard's average lands in); undefined: the target's own arenas, at the ranges.
  Tensor params, grads;
  /// Sums a small float32 tensor over the ranks that share the arena, in place (collective; empty:
  /// one process, nothing to add): what a sharded gradient hook combines its shard's part with.
  std::function<void(Tensor&)> sum_over_ranks;
};

/// The elements of `whole` (1-D, in an arena's layout) that `shard` names, one after the other
/// in the order of `shard`: the layout of sharded per-element state. Requires every range inside
/// `whole` (dpl::Error otherwise).
Tensor gather_ranges(const Tensor& whole, const std::vector<ArenaRange>& shard);

/// What a gradient hook sees under sharded optimizer state: this rank's shard of the averaged
/// gradients, as pieces (views it may change in place), and the sum over the ranks with which it
/// combines what it computes from them (a global norm from each rank's sum of squares).
struct GradientShard {
  std::vector<Tensor> grads;
  std::function<void(Tensor&)> sum_over_ranks;
};

/// A gradient hook's counterpart under sharded optimizer state (see Optimizer::add_gradient_hook):
/// the same transform, made from this rank's shard and collectives over the ranks. Every rank
/// runs it at the same step.
using ShardedGradientHook = std::function<void(GradientShard& shard)>;

/// How an allreduce overlapped with backward (parallel::GradientReducer) obtains an optimizer's
/// gradients range by range, while backward still runs.
struct GradientRanges {
  /// The float32 buffer that prepare_gradients() returns first (the arena's element count), or
  /// undefined when that is the model's own float32 gradient arena, which backward fills and
  /// which needs no preparing.
  Tensor gradients;
  /// Fills elements [begin, end) of `gradients` from the model's gradients, as
  /// prepare_gradients() fills all of them, and raises *flag (a one-element float32 tensor, when
  /// not null) if one of them comes out Inf or NaN. Called for disjoint ranges, one at a time,
  /// possibly from another thread, while the model's gradients of other ranges are still being
  /// written.
  std::function<void(std::int64_t begin, std::int64_t end, Tensor* flag)> prepare;
};

/// One stage of an optimizer's step pipeline. The stages form a chain, outermost first, that
/// ends in the update rule's own stage (the non-finite check, replay and the fused update, made
/// by every optim::Optimizer). optim::Optimizer's step methods (setup, update, prepare_gradients,
/// the replay protocol, ...) call the outermost stage; each hook of a stage either acts and
/// passes the call to next() — around it, before or after — or answers itself. Every hook's
/// default passes the call on unchanged, so a stage overrides only the hooks it changes: a
/// wrapper (optim::MixedPrecision, parallel::MultiNodeOptimizer) adds a stage instead of
/// forwarding every method of the optimizer it wraps. The hooks mean what optim::Optimizer's
/// methods of the same names document.
///
/// Requires: a stage is chained once (by optim::OptimizerWrapper), before any hook is called.
class StepStage {
 public:
  virtual ~StepStage() = default;

  // The step: binding, the loss, the gradients, the update.
  virtual void setup(nn::Module& model) { next().setup(model); }
  /// loss_fn(i) for the micro-batches i in [0, micro_batches), each loss's backward scaled by
  /// 1 / micro_batches so the gradients add up to their mean, then one update.
  virtual Variable update(const std::function<Variable(int)>& loss_fn, int micro_batches) {
    return next().update(loss_fn, micro_batches);
  }
  virtual void backward(const Variable& loss) { next().backward(loss); }
  virtual std::vector<Tensor> prepare_gradients() { return next().prepare_gradients(); }
  virtual GradientRanges gradient_ranges() { return next().gradient_ranges(); }
  virtual std::vector<Tensor> adopt_prepared_gradients(const Tensor& flag) {
    return next().adopt_prepared_gradients(flag);
  }
  virtual void update() { next().update(); }
  virtual nn::Module& target() const { return next().target(); }

  // The non-finite verdict and its counters.
  virtual bool gradients_finite() { return next().gradients_finite(); }
  virtual bool stops_on_non_finite() const { return next().stops_on_non_finite(); }
  virtual void set_non_finite_policy(NonFinitePolicy policy) { next().set_non_finite_policy(policy); }
  virtual NonFinitePolicy non_finite_policy() const { return next().non_finite_policy(); }
  virtual std::int64_t iteration() const { return next().iteration(); }
  virtual std::int64_t skipped_steps() const { return next().skipped_steps(); }
  virtual bool last_step_skipped() const { return next().last_step_skipped(); }

  // The checkpoint state: a stage adds its own entries to the rule's.
  virtual std::vector<std::pair<std::string, Tensor>> state() const { return next().state(); }
  virtual std::map<std::string, double> state_scalars() const { return next().state_scalars(); }
  virtual void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const std::map<std::string, double>& scalars) {
    next().load_state(tensors, scalars);
  }

  // Sharded optimizer state (parallel::MultiNodeOptimizer::set_zero_stage): the pipeline
  // updates, and keeps state (and a 16-bit model's float32 master weights) for, the elements of
  // the arena that shard.ranges names only; empty ranges take the whole arena again.
  // gathered_state() is state() with such shards gathered into the whole arena's layout (a
  // collective then, on every rank).
  virtual void set_state_shard(const StateShard& shard) { next().set_state_shard(shard); }
  virtual std::vector<std::pair<std::string, Tensor>> gathered_state() { return next().gathered_state(); }
  /// Under a shard: the float32 buffer that receives the shard's averaged gradients (its elements
  /// one after the other, as the state holds them), or an undefined tensor when they go back
  /// into prepare_gradients()'s first buffer at their places in the arena (a float32 model's
  /// own gradients).
  virtual Tensor shard_gradients() { return next().shard_gradients(); }

  // Replay of a recorded step (train::CapturedStep). skip_flag: an outer stage's flag, which
  // the recorded update skips on instead of the rule stage's own.
  virtual std::string replay_refusal() const { return next().replay_refusal(); }
  virtual void set_replay_mode(bool on, const Tensor& skip_flag) { next().set_replay_mode(on, skip_flag); }
  virtual void prepare_replay() { next().prepare_replay(); }
  virtual void finish_replay() { next().finish_replay(); }
  /// finish_replay() for a stage whose outer stage read the verdict itself: counts a step,
  /// taken or not.
  virtual void count_replayed_step(bool taken) { next().count_replayed_step(taken); }
  virtual bool can_defer_verdict() const { return next().can_defer_verdict(); }
  /// Whether this stage is in replay mode.
  bool replay_mode() const { return replay_; }

 protected:
  /// The stage this one passes calls to. Requires a chained stage (dpl::Error otherwise).
  StepStage& next() const;
  /// For update() overrides: for each micro-batch i in order, loss_fn(i), then backward(i, its
  /// loss scaled by 1 / micro_batches; the loss itself for one). Returns loss_fn(0)'s Variable
  /// for one micro-batch, else one holding the mean of the losses. Requires micro_batches >= 1
  /// and one-element losses (dpl::Error otherwise).
  static Variable accumulate_gradients(const std::function<Variable(int)>& loss_fn, int micro_batches,
                                       const std::function<void(int, const Variable&)>& backward);

  bool replay_ = false;

 private:
  friend class OptimizerWrapper;
  StepStage* next_ = nullptr;
};

}  // namespace dpl::optim
