#pragma once
// Optimizers: update a model's parameters from its gradients, one fused pass over the arena.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"
#include "dpl/optim/step_pipeline.hpp"

namespace dpl::optim {

class RuleStage;

/// Which parameters something applies to, by the model's dotted name and the shape.
using ParameterPredicate = std::function<bool(const std::string& name, const Shape& shape)>;

/// A parameter group, as PyTorch's param_groups: the parameters it selects update with its
/// learning rate and weight decay instead of the optimizer's. Either setting left unset follows
/// the optimizer's. `optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f)` is the
/// usual "no decay on biases and normalisation weights".
///
/// A group's lr is fixed relative to the optimizer's lr(): given lr 0.01 while lr() is 0.1, the
/// group keeps a tenth of lr() as set_lr() and schedules change it, as PyTorch's schedulers scale
/// every group's lr by one factor. Its weight decay is its own and stays as given.
struct ParamGroup {
  /// The parameters for which selects(name, shape) is true, names as the model's
  /// named_parameters() gives them. Requires a callable predicate (dpl::Error at add_param_group).
  explicit ParamGroup(ParameterPredicate selects, std::string label = "group")
      : selects_(std::move(selects)), label_(std::move(label)) {}
  /// The parameters of exactly these names; setup refuses a name the model does not have.
  static ParamGroup named(std::vector<std::string> names, std::string label = "group");
  /// Every parameter of rank <= 1: biases and the weights of normalisation layers.
  static ParamGroup one_dimensional(std::string label = "one-dimensional");

  DPL_ARG(std::optional<float>, lr);
  DPL_ARG(std::optional<float>, weight_decay);

 public:
  const ParameterPredicate& selects() const { return selects_; }
  const std::string& label() const { return label_; }
  /// The names a named() group lists (empty for a predicate group).
  const std::vector<std::string>& names() const { return names_; }

 private:
  ParameterPredicate selects_;
  std::string label_;
  std::vector<std::string> names_;
};

/// A contiguous range of a parameter arena whose parameters are in one group, with that group's
/// lr and weight decay for this step. An optimizer's ranges cover its arena, padding included,
/// in order; a rule runs its update once per range.
struct GroupRange {
  std::int64_t begin = 0, numel = 0;
  std::size_t group = 0;  // 0: the default group; g: the g-th group added
  float lr = 0.f, weight_decay = 0.f;
};

/// One parameter group as the optimizer applies it now (Optimizer::param_groups()).
struct ParamGroupInfo {
  std::string label;
  float lr = 0.f;
  float weight_decay = 0.f;
  /// The names of its parameters in the bound model (empty before setup()).
  std::vector<std::string> parameters;
};

/// An optimizer: an update rule and its state (learning rate, weight decay, t(), the rule's
/// state arenas), and the step pipeline that runs it (dpl/optim/step_pipeline.hpp): the non-finite
/// check and replay of a recorded step come with every optimizer; a wrapper
/// (OptimizerWrapper: MixedPrecision, parallel::MultiNodeOptimizer) adds its own stage in front.
///
/// Usage: setup(model) once, then per step either update(loss_fn) — which clears the gradients,
/// runs loss_fn (forward), backward and the update — or, by hand, zero_grad(), backward(loss)
/// (loss.backward() is the same except under float16 MixedPrecision, which scales the loss),
/// update(). Each update reads the model's gradient arena and writes its parameter arena in one
/// pass; the state (moments, velocities) lives in arenas of the same layout.
///
/// A rule of one's own derives from Optimizer and overrides lr(), set_lr() and step() (plus
/// init_state(), own_state(), add_own_scalars() and load_own_scalars() when it keeps state,
/// replay_values() to run in replay mode, and step_values() with a step() over range_steps() for
/// parameter groups).
class Optimizer {
 public:
  Optimizer();
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // --- the update rule and its state

  /// The learning rate (alpha for Adam).
  virtual float lr() const = 0;
  virtual void set_lr(float lr) = 0;
  /// Weight decay rate: the update uses grad + rate * param (0 = off, the default). Requires a
  /// finite rate >= 0 (dpl::Error otherwise).
  float weight_decay() const;
  void set_weight_decay(float rate);
  /// Number of updates done since setup() (skipped steps are not counted).
  std::int64_t t() const;

  // --- parameter groups (docs/optimizers.md, "Parameter groups")

  /// Adds a group. Groups are matched in the order added and the first that selects a parameter
  /// takes it; the parameters no group selects form the default group, which follows lr() and
  /// weight_decay(). Takes effect at the next update; the state (moments) is kept. On a wrapper
  /// (MixedPrecision, parallel::MultiNodeOptimizer) it adds the group to the wrapped rule, whose
  /// names are the model's.
  ///
  /// Requires a rule that supports groups (every one of this library's; a rule of one's own
  /// must implement step_values()), a finite group lr and weight decay >= 0, a group lr only
  /// while lr() > 0 (it is kept as a share of lr()), and no replay mode. At setup() and at the
  /// next update, a group that selects no parameter, or names one the model does not have, is
  /// refused with the group's label and the model's names. Throws dpl::Error otherwise.
  void add_param_group(ParamGroup group);
  /// The default group, then each added group, with its lr and weight decay now and (after
  /// setup()) the names of its parameters.
  std::vector<ParamGroupInfo> param_groups() const;
  /// The state arenas by name ("velocity"; "m", "v"; MixedPrecision adds "master"), each with the
  /// parameter arena's layout (under sharded optimizer state: this rank's shard of it, see
  /// state_shard()). These views of the live state are the tensor half of what
  /// load_state() restores.
  std::vector<std::pair<std::string, Tensor>> state() const;
  /// state() with any sharded part gathered: under a parallel::MultiNodeOptimizer that shards the
  /// optimizer state, each rank's state() holds its shard only, and this call (collective: every
  /// rank must make it) returns the whole arena's state on every rank; otherwise it is state().
  /// train::save_checkpoint saves this.
  std::vector<std::pair<std::string, Tensor>> gathered_state();
  /// The elements of the parameter arena this optimizer's rule updates and keeps state for, in
  /// arena order (its per-element state holds them one after the other), or none for the whole
  /// arena (unsharded, the default). Under optim::MixedPrecision the rule runs on the float32
  /// master weights, whose own arena then holds just this rank's shard.
  const std::vector<ArenaRange>& state_shard() const;
  /// The elements state_shard() names together, or -1 for the whole arena.
  std::int64_t state_shard_numel() const;
  /// The scalar half of the state: "t", "lr" and "weight_decay", with parameter groups their
  /// settings ("param_groups", "param_group<g>/lr_share", ".../weight_decay"), plus each optimizer's own
  /// (Adam: "moment_steps", and its fixed hyperparameters "beta1", "beta2", "eps"; MomentumSGD:
  /// "momentum"; float16 MixedPrecision: "loss_scale", "loss_scale_good_steps"). Values are
  /// exact: the floats and counts convert to double without rounding.
  std::map<std::string, double> state_scalars() const;
  /// Restores state exported by state() and state_scalars() of an optimizer of the same kind
  /// and settings, bound to a model of the same parameter layout, so that the next updates are
  /// bit-identical to those the exporting optimizer would have made.
  ///
  /// Requires: setup() done; tensors named as state() names them, each of the same dtype and
  /// shape; scalars with exactly the keys of state_scalars(), t and moment_steps whole numbers
  /// >= 0, lr and weight_decay valid for set_lr/set_weight_decay, and the fixed hyperparameters
  /// equal to this optimizer's (they are settings of the run, checked rather than copied).
  /// Ensures: the state is copied in (tensors on this optimizer's device). Throws dpl::Error
  /// naming the optimizer and the offending entry; everything is checked before anything
  /// changes, so on an error the optimizer is unchanged.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, double>& scalars);

  // --- the step, run through the pipeline

  /// Binds the optimizer to model (packing its arenas) and resets the state.
  void setup(nn::Module& model);
  /// One step from the gradients now in the arena. Requires setup().
  void update();
  /// zero_grad(); loss = loss_fn(); backward(loss); update(). Returns the loss (unscaled).
  Variable update(const std::function<Variable()>& loss_fn);
  /// Gradient accumulation: one step from micro_batches batches, as from one batch that many
  /// times as large. zero_grad(); for i in [0, micro_batches): loss_i = loss_fn(i) (the forward of
  /// micro-batch i) and backward(loss_i / micro_batches); update(). Returns the mean of the
  /// losses (loss_fn(0)'s own Variable for one micro-batch). Under a MultiNodeOptimizer the
  /// gradients are averaged over the ranks once, after the last backward (with overlap, bucket by
  /// bucket during it), as DDP's no_sync does. Requires micro_batches >= 1 and one-element
  /// losses; replay mode takes one micro-batch (dpl::Error otherwise).
  Variable update(const std::function<Variable(int)>& loss_fn, int micro_batches);
  /// Runs backward from loss as this optimizer's update needs it: loss.backward() here;
  /// MixedPrecision with float16 scales the loss first. Requires a one-element loss.
  void backward(const Variable& loss);
  /// Makes this step's gradients ready for update() and returns the float32 buffers that a
  /// data-parallel wrapper must average (kMean) over the ranks in between, the gradients first;
  /// update() then reads them as averaged. Call once per step, after backward and before
  /// update(). Here: the model's gradient arena, as it is, and — unless the non-finite check is
  /// off — a one-element float32 flag, 1 when the arena holds an Inf or NaN (one read-only pass,
  /// nothing read back). MixedPrecision: its float32 master gradients and the flag, raised in the
  /// pass that fills them (float16: its overflow flag, always there). The flag, when present, is
  /// the second buffer and the last. Requires setup().
  std::vector<Tensor> prepare_gradients();
  /// For an overlapped allreduce: see GradientRanges. Here: undefined gradients (the model's
  /// float32 arena is what is averaged). MixedPrecision with a 16-bit dtype: its float32 master
  /// gradients, each range converted as prepare_gradients() converts them all. Once a range was
  /// prepared, the next prepare_gradients() converts nothing: it returns the buffers as the
  /// ranges left them (averaged by then) and runs only the non-finite check over them. Requires
  /// setup(); the ranges are valid until the model's arena changes.
  GradientRanges gradient_ranges();
  /// prepare_gradients() for a step whose gradients an overlapped allreduce has already prepared
  /// (range by range, or the model's own float32 arena) and averaged, and whose non-finite check
  /// has already run before the averaging, bucket by bucket: `flag` is that check's verdict on
  /// this rank (a one-element float32 tensor on the gradients' device). Copies it into this
  /// step's flag instead of another pass over the gradients, and returns what
  /// prepare_gradients() returns; a data-parallel wrapper then averages the returned flag (the
  /// gradients are averaged already). MixedPrecision falls back to prepare_gradients() when no
  /// range was prepared this step. Requires setup().
  std::vector<Tensor> adopt_prepared_gradients(const Tensor& flag);
  /// Whether the gradients this step would apply are finite, from the flag of the last
  /// prepare_gradients() (averaged over the ranks when a MultiNodeOptimizer sits outside): true
  /// when the check is off. The first call after prepare_gradients() reads the flag (one
  /// four-byte device-to-host copy, which waits for the device); later calls return that answer.
  bool gradients_finite();
  /// Whether a step whose gradients are not finite stops training (throws) rather than being
  /// skipped: policy kStop here; MixedPrecision with float16 always skips (loss scaling).
  bool stops_on_non_finite() const;
  /// Sets every gradient of the target to zero.
  void zero_grad();
  /// Sets what an update does with non-finite gradients (default kStop).
  void set_non_finite_policy(NonFinitePolicy policy);
  NonFinitePolicy non_finite_policy() const;
  /// update() calls since setup(), the current one included while it runs: the iteration that
  /// non-finite errors name (the Trainer's iteration in a run that was not resumed).
  std::int64_t iteration() const;
  /// Steps skipped since setup() because their gradients were not finite (kSkip, or float16
  /// overflow under MixedPrecision), and whether the last update() was one.
  std::int64_t skipped_steps() const;
  bool last_step_skipped() const;
  /// The bound model. Requires setup().
  nn::Module& target() const;

  /// Adds a hook that every update() runs on the gradients the rule reads, before the step,
  /// after the hooks added before it (clip_gradients, or a user's own transform). `device_only`
  /// says the hook only queues work on the gradients' device and reads nothing back, so that a
  /// recorded step (replay mode) may include it; any other hook keeps the optimizer out of replay
  /// mode. `sharded`, when given, is the same transform under sharded optimizer state
  /// (parallel::MultiNodeOptimizer::set_zero_stage), where the gradients are this rank's shard
  /// only (clip_gradients gives one); a hook without it keeps sharding out (dpl::Error, on every
  /// rank). Requires a callable hook; throws dpl::Error for an empty one.
  void add_gradient_hook(GradientHook hook, bool device_only = false, ShardedGradientHook sharded = {});
  /// Number of hooks added.
  std::size_t gradient_hook_count() const;

  // --- replay mode: a step recorded once and replayed (train::CapturedStep, docs/cuda-graphs.md)

  /// Empty when this optimizer can run in replay mode; otherwise why not (an optimizer whose
  /// step() does not take its values from replay_values(), or a gradient hook that is not
  /// device-only).
  std::string replay_refusal() const;
  /// Enters (true) or leaves replay mode. In it update() and update(loss_fn) only queue a step's
  /// device work, reading nothing back: the update kernel takes this step's values (learning
  /// rate, Adam's bias correction) from a device copy, and leaves parameters and state unchanged
  /// while the non-finite flag is raised. What update() does on the host moves to
  /// prepare_replay() and finish_replay(), called around each run of the recorded work. Requires
  /// setup() and an empty replay_refusal() (dpl::Error otherwise); the warm-up steps that lay out
  /// the state come first, in normal mode.
  void set_replay_mode(bool on);
  bool replay_mode() const;
  /// Before a run of the recorded step: queues the copy of this step's values to the device.
  void prepare_replay();
  /// After a run: reads the non-finite flag when there is one (one wait for the device) and
  /// counts the step as taken or skipped, as update() would have; throws update()'s dpl::Error
  /// under NonFinitePolicy::kStop.
  void finish_replay();
  /// Whether finish_replay_deferred() may stand in for finish_replay(): in replay mode under
  /// NonFinitePolicy::kStop, with the rule's own flag. False for wrappers (MixedPrecision with a
  /// 16-bit dtype, parallel::MultiNodeOptimizer), which read the verdict themselves.
  bool can_defer_verdict() const;
  /// finish_replay() without the wait for the device: queues the read of this run's flag, then
  /// settles the previous run's verdict (that run ended before this one began, so its read is
  /// done or nearly), and counts this run's step as taken. Under kStop a recorded step never
  /// lowers the flag, so from a non-finite step on every run leaves the parameters and the state
  /// as they were; the error (update()'s, naming the failing iteration and its loss, with the
  /// counters as update() leaves them) comes from the next finish_replay_deferred() or
  /// settle_replay(). Until then t(), iteration() and the state scalars count the last run as
  /// taken. loss: this run's loss as a tensor of its own, for that message. Requires
  /// can_defer_verdict() (dpl::Error otherwise).
  void finish_replay_deferred(const Tensor& loss);
  /// Reads the verdict that finish_replay_deferred() left pending, waiting for its run, and
  /// throws the non-finite error when the step was not finite. Does nothing when none is
  /// pending. Call it before anything reads the counters or the parameters as final
  /// (set_replay_mode() and load_state() call it themselves).
  void settle_replay();
  /// Whether a verdict is pending (see finish_replay_deferred()).
  bool verdict_pending() const;

 protected:
  /// For OptimizerWrapper: an optimizer whose pipeline is `front` (chained by the wrapper) and
  /// whose rule is `rule`'s.
  Optimizer(StepStage& front, Optimizer& rule);

  /// Allocates and zeroes the state for the arena's layout (state_zeros() for per-element state).
  virtual void init_state(const nn::ParameterArena& /*arena*/) {}
  /// Zeroed per-element state for the arena: one value per element of the arena, or of this
  /// rank's shard of it when the state is sharded (in the dtype of the shard's own parameters
  /// when it has them: float32 masters of a 16-bit model).
  Tensor state_zeros(const nn::ParameterArena& arena) const;
  /// Whether the rule's update of an element needs nothing but that element (and the step's
  /// values), so that its state can be sharded. True by default; false for LAMB and LARS, whose
  /// trust ratios take norms over whole parameter tensors.
  virtual bool elementwise() const { return true; }
  /// Runs the fused update over the whole arena (t() already counts this step). In replay mode it
  /// must take its values from replay_values_on_device() and skip on replay_skip_flag().
  virtual void step(nn::ParameterArena& arena) = 0;
  /// The values of the next step's update for one parameter group's lr and weight decay, in the
  /// order its kernel reads them; empty (the default) for a rule without parameter groups.
  virtual std::vector<float> step_values(float /*lr*/, float /*weight_decay*/) const { return {}; }
  /// The values of the next step's update, in the order its kernel reads them; empty for an
  /// optimizer that cannot run in replay mode. By default step_values() of every group, the
  /// default group first, one after the other (group g's at g * step_values().size()).
  virtual std::vector<float> replay_values() const;

  /// The arena's ranges of one group each (GroupRange): one over the whole arena, with lr() and
  /// weight_decay(), when no group was added; only their parts inside the shard when the state is
  /// sharded. Throws dpl::Error for a group that selects nothing
  /// or names a missing parameter.
  std::vector<GroupRange> group_ranges(const nn::ParameterArena& arena) const;
  /// group_ranges() over the whole arena, also when the state is sharded (LAMB and LARS lay
  /// out their tables from these).
  std::vector<GroupRange> all_group_ranges(const nn::ParameterArena& arena) const;
  /// What an elementwise rule's kernel runs on for one group range: the range's slices of the
  /// parameter and gradient arenas, its step_values(), and in replay mode its row of the device
  /// values (replay_values_on_device(); undefined otherwise).
  struct RangeStep {
    GroupRange range;
    Tensor param, grad;
    std::vector<float> values;
    Tensor device_values;
    /// Where the range starts in the state arenas (range.begin, or its place among the shard's
    /// elements when the state is sharded).
    std::int64_t state_begin = 0;
    /// The range's slice of a state arena of the parameters' layout (an empty state stays empty).
    Tensor state(const Tensor& arena_layout) const;
  };
  /// One RangeStep per group range of arena, in order.
  std::vector<RangeStep> range_steps(nn::ParameterArena& arena) const;
  /// The group of each of the arena's entries, in order (0: the default group).
  const std::vector<std::size_t>& entry_groups(const nn::ParameterArena& arena) const;
  /// The number of groups, the default one included.
  std::size_t group_count() const { return groups_.size() + 1; }
  /// The lr and weight decay of group g for this step.
  float group_lr(std::size_t g) const;
  float group_weight_decay(std::size_t g) const;
  /// Called with the model's arena whenever the update may meet a new group layout (setup, each
  /// update, entering replay mode), after init_state(): validates the groups (entry_groups()). A
  /// rule with tables per group (LAMB, LARS) rebuilds them here when the layout changed.
  virtual void lay_out_groups(const nn::ParameterArena& arena) { entry_groups(arena); }
  /// Called after each step that was taken (Adam counts the steps folded into its moments).
  virtual void on_step_taken() {}
  /// Undoes on_step_taken() for a step counted as taken before its verdict was read, which then
  /// came out non-finite (finish_replay_deferred()).
  virtual void on_step_withdrawn() {}
  /// The rule's state arenas, as state() names them (views of the live state).
  virtual std::vector<std::pair<std::string, Tensor>> own_state() const { return {}; }
  /// Adds the rule's own scalars (beyond "t", "lr" and "weight_decay") to state_scalars().
  virtual void add_own_scalars(std::map<std::string, double>& /*scalars*/) const {}
  /// load_state's hook for the rule's own scalars (the keys beyond the base ones, already known
  /// to be present): checks them all, and only then assigns. Throws dpl::Error on a bad value,
  /// before assigning anything.
  virtual void load_own_scalars(const std::map<std::string, double>& /*scalars*/) {}
  /// In replay mode: the device copy of replay_values() and the flag that makes the update skip
  /// (undefined when there is none); undefined tensors otherwise.
  const Tensor& replay_values_on_device() const;
  const Tensor& replay_skip_flag() const;

 private:
  friend class RuleStage;
  friend class OptimizerWrapper;
  RuleStage& rule_stage() const;

  std::unique_ptr<RuleStage> own_stage_;  // a rule's own stage; null in a wrapper
  StepStage* front_;                      // the outermost stage of the pipeline
  Optimizer* rule_;                       // this, or the rule a wrapper applies
  std::int64_t t_ = 0;
  float weight_decay_ = 0.f;
  // The sharded part of the arena (empty, numel -1: none, the whole arena); set through the
  // pipeline. shard_state_begin_[i]: where shard_[i] starts in the state.
  // shard_params_/shard_grads_: StateShard's params and grads (undefined: the arena's).
  std::vector<ArenaRange> shard_;
  std::vector<std::int64_t> shard_state_begin_;
  std::int64_t shard_numel_ = -1;
  Tensor shard_params_, shard_grads_;
  // The added groups, each with its lr as a share of lr() (unset: follows lr()).
  struct Group {
    ParamGroup settings;
    std::optional<float> lr_share;
  };
  std::vector<Group> groups_;
  // entry_groups() for the arena of id groups_arena_, under groups_version_ of the groups.
  mutable std::vector<std::size_t> entry_groups_;
  mutable std::uint64_t groups_arena_ = 0, groups_version_ = 0, entry_groups_version_ = ~std::uint64_t{0};
};

/// An optimizer that applies another's update rule with a stage of its own in front of the
/// other's pipeline: lr(), t(), the state and the hooks are the wrapped optimizer's, and every
/// step call passes through `stage` first. A null stage passes every call straight through.
/// Requires a non-null wrapped optimizer (dpl::Error naming `who` otherwise).
class OptimizerWrapper : public Optimizer {
 public:
  float lr() const final { return actual_->lr(); }
  void set_lr(float lr) final { actual_->set_lr(lr); }
  /// The wrapped optimizer.
  Optimizer& actual() const { return *actual_; }

 protected:
  OptimizerWrapper(const char* who, std::unique_ptr<Optimizer> actual, std::unique_ptr<StepStage> stage);
  ~OptimizerWrapper() override;
  /// Never called: the pipeline runs the wrapped rule's step.
  void step(nn::ParameterArena& arena) final;
  /// The wrapper's own stage (null when it passes every call through).
  StepStage* stage() const { return stage_.get(); }

 private:
  static Optimizer& checked(const char* who, const std::unique_ptr<Optimizer>& actual);
  std::unique_ptr<Optimizer> actual_;
  std::unique_ptr<StepStage> stage_;
};

/// SGD's settings, in libtorch's style: `optim::SGD(optim::SGDOptions(0.1f).weight_decay(1e-4f))`.
/// Each setter returns the options, so calls chain; the constructor checks the values.
struct SGDOptions {
  explicit SGDOptions(float lr = 0.01f) : lr_(lr) {}
  SGDOptions& lr(float value) { lr_ = value; return *this; }
  float lr() const { return lr_; }
  SGDOptions& weight_decay(float value) { weight_decay_ = value; return *this; }
  float weight_decay() const { return weight_decay_; }

 private:
  float lr_;
  float weight_decay_ = 0.f;
};

/// Plain gradient descent: p -= lr * g.
class SGD : public Optimizer {
 public:
  /// Requires a finite lr >= 0 (dpl::Error otherwise).
  explicit SGD(float lr = 0.01f);
  /// Requires a finite lr >= 0 and a finite weight_decay >= 0 (dpl::Error otherwise).
  explicit SGD(const SGDOptions& options);
  float lr() const override { return lr_; }
  void set_lr(float lr) override;

 protected:
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;

 private:
  float lr_;
};

/// MomentumSGD's settings: `optim::MomentumSGD(optim::MomentumSGDOptions(0.1f).momentum(0.9f))`.
struct MomentumSGDOptions {
  explicit MomentumSGDOptions(float lr = 0.01f) : lr_(lr) {}
  MomentumSGDOptions& lr(float value) { lr_ = value; return *this; }
  float lr() const { return lr_; }
  MomentumSGDOptions& momentum(float value) { momentum_ = value; return *this; }
  float momentum() const { return momentum_; }
  MomentumSGDOptions& weight_decay(float value) { weight_decay_ = value; return *this; }
  float weight_decay() const { return weight_decay_; }

 private:
  float lr_;
  float momentum_ = 0.9f;
  float weight_decay_ = 0.f;
};

/// Chainer's MomentumSGD: v = momentum * v - lr * g; p += v.
class MomentumSGD : public Optimizer {
 public:
  /// Requires a finite lr >= 0 and momentum in [0, 1) (dpl::Error otherwise).
  explicit MomentumSGD(float lr = 0.01f, float momentum = 0.9f);
  /// As above, and a finite weight_decay >= 0.
  explicit MomentumSGD(const MomentumSGDOptions& options);
  float lr() const override { return lr_; }
  void set_lr(float lr) override;
  float momentum() const { return momentum_; }

 protected:
  std::vector<std::pair<std::string, Tensor>> own_state() const override { return {{"velocity", velocity_}}; }
  void add_own_scalars(std::map<std::string, double>& scalars) const override;
  void init_state(const nn::ParameterArena& arena) override;
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
  void load_own_scalars(const std::map<std::string, double>& scalars) override;

 private:
  float lr_, momentum_;
  Tensor velocity_;
};

/// The settings Adam, AdamW and LAMB share (lr, betas, eps, weight_decay), each setter returning
/// the derived options so that calls chain; the defaults are each rule's.
template <typename Derived>
struct MomentOptions {
  Derived& lr(float value) { lr_ = value; return self(); }
  float lr() const { return lr_; }
  Derived& betas(float beta1, float beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return self();
  }
  std::pair<float, float> betas() const { return {beta1_, beta2_}; }
  Derived& eps(float value) { eps_ = value; return self(); }
  float eps() const { return eps_; }
  Derived& weight_decay(float value) { weight_decay_ = value; return self(); }
  float weight_decay() const { return weight_decay_; }

 protected:
  MomentOptions(float lr, float eps, float weight_decay) : lr_(lr), eps_(eps), weight_decay_(weight_decay) {}

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  float lr_;
  float beta1_ = 0.9f, beta2_ = 0.999f;
  float eps_;
  float weight_decay_;
};

/// Adam's settings, in libtorch's style:
/// `optim::Adam(optim::AdamOptions().lr(1e-3f).betas(0.9f, 0.999f).eps(1e-8f).weight_decay(0.f))`.
/// lr is Chainer's alpha; defaults lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
struct AdamOptions : MomentOptions<AdamOptions> {
  explicit AdamOptions(float lr = 1e-3f) : MomentOptions(lr, 1e-8f, 0.f) {}
};

/// What Adam, AdamW and LAMB share: the learning rate, the moment arenas "m" and "v", beta1,
/// beta2 and eps (fixed settings of the run, checked by load_state), and the count of steps
/// folded into the moments, which the bias correction reads ("moment_steps", restarting from zero
/// with the state).
class MomentOptimizer : public Optimizer {
 public:
  float lr() const final { return lr_; }
  /// Requires a finite lr >= 0 (dpl::Error otherwise).
  void set_lr(float lr) final;
  float beta1() const { return beta1_; }
  float beta2() const { return beta2_; }
  float eps() const { return eps_; }

 protected:
  /// Requires a finite lr >= 0, beta1 and beta2 in [0, 1) and eps > 0 (dpl::Error naming `who`
  /// otherwise).
  MomentOptimizer(const char* who, float lr, float beta1, float beta2, float eps);
  std::vector<std::pair<std::string, Tensor>> own_state() const override { return {{"m", m_}, {"v", v_}}; }
  void add_own_scalars(std::map<std::string, double>& scalars) const override;
  void init_state(const nn::ParameterArena& arena) override;
  void on_step_taken() override { ++moment_steps_; }
  void on_step_withdrawn() override { --moment_steps_; }
  void load_own_scalars(const std::map<std::string, double>& scalars) override;
  /// 1 - beta^t for the step about to be taken (on_step_taken() counts it afterwards), in double.
  double bias_correction(float beta) const;

  Tensor m_, v_;

 private:
  const char* who_;
  float lr_, beta1_, beta2_, eps_;
  // The bias correction must count the steps folded into m_ and v_, which restart from zero when
  // the state does; t() keeps counting every update.
  std::int64_t moment_steps_ = 0;
};

/// Chainer's Adam (defaults alpha 1e-3, beta1 0.9, beta2 0.999, eps 1e-8):
/// m += (1-beta1)(g-m); v += (1-beta2)(g^2-v);
/// p -= alpha * sqrt(1-beta2^t)/(1-beta1^t) * m / (sqrt(v) + eps),
/// where t counts the steps since m and v were last zeroed (setup() or a repacked model).
/// weight_decay is L2 added to the gradient (g = grad + weight_decay * p); AdamW
/// (dpl/optim/rules.hpp) decouples it.
class Adam : public MomentOptimizer {
 public:
  /// Requires a finite alpha >= 0, beta1 and beta2 in [0, 1) and eps > 0 (dpl::Error otherwise).
  explicit Adam(float alpha = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);
  /// As above, and a finite weight_decay >= 0.
  explicit Adam(const AdamOptions& options);

 protected:
  void step(nn::ParameterArena& arena) override;
  std::vector<float> step_values(float lr, float weight_decay) const override;
};

}  // namespace dpl::optim
