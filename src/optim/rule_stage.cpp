#include "optim/rule_stage.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"
#include "optim/non_finite.hpp"

namespace dpl::optim {

RuleStage::~RuleStage() = default;

void RuleStage::lay_out_state(nn::ParameterArena& arena) {
  if (arena.id() != state_arena_) {
    rule_.init_state(arena);
    state_arena_ = arena.id();
  }
  // Groups may have been added since the last step; the state is kept.
  rule_.lay_out_groups(arena);
}

void RuleStage::setup(nn::Module& model) {
  if (replay_) set_replay_mode(false, Tensor());
  target_ = &model;
  rule_.t_ = 0;
  reset_counters();
  pending_verdict_ = nullptr;
  pending_loss_ = Tensor();
  nn::ParameterArena& arena = model.arena();
  rule_.init_state(arena);
  state_arena_ = arena.id();
  rule_.lay_out_groups(arena);
}

void RuleStage::update() {
  nn::ParameterArena& arena = target().arena();
  if (!prepared_) prepare_gradients();
  if (replay_) {
    // Recorded, not run: the verdict and the counting wait for finish_replay().
    DPL_CHECK(arena.id() == state_arena_, "Optimizer: the model's parameters changed since replay mode began; ",
              "leave replay mode and record the step again");
    prepared_ = false;
    run_hooks(arena);  // device-only ones (replay_refusal)
    rule_.step(arena);
    return;
  }
  if (!admit_step(arena.grads())) return;
  // A changed parameter set invalidates the per-element state.
  lay_out_state(arena);
  run_hooks(arena);
  ++rule_.t_;
  rule_.step(arena);
  rule_.on_step_taken();
}

void RuleStage::set_state_shard(const StateShard& state_shard) {
  const char* who = "sharded optimizer state";
  const std::vector<ArenaRange>& shard = state_shard.ranges;
  std::int64_t numel = -1;
  std::vector<std::int64_t> state_begin;
  if (!shard.empty()) {
    DPL_CHECK(rule_.elementwise(), who, ": this optimizer's update is not elementwise (LAMB and LARS take norms over ",
              "whole parameter tensors), so its state cannot be split between ranks; shard SGD, MomentumSGD, Adam, ",
              "AdamW, RMSprop or Adagrad, or leave the state unsharded");
    const auto unsharded = static_cast<std::size_t>(
        std::count_if(sharded_hooks_.begin(), sharded_hooks_.end(), [](const ShardedGradientHook& h) { return !h; }));
    DPL_CHECK(unsharded == 0, who, ": the optimizer has ", unsharded, " gradient hook(s) without a sharded ",
              "form, which read the whole averaged gradient; a sharded step averages only each rank's shard. ",
              "Give add_gradient_hook the hook's sharded form (clip_gradients does), remove the hooks, or leave the ",
              "state unsharded");
    DPL_CHECK(!replay_, who, ": not in replay mode (a recorded step); leave replay mode first");
    numel = 0;
    std::int64_t end = 0;
    for (const ArenaRange& r : shard) {
      DPL_CHECK(r.begin >= end && r.numel > 0, who, ": expected non-empty ranges in arena order, got [", r.begin,
                ", ", r.begin + r.numel, ") after one ending at ", end);
      state_begin.push_back(numel);
      numel += r.numel;
      end = r.begin + r.numel;
    }
  }
  const auto same = [](const std::vector<ArenaRange>& a, const std::vector<ArenaRange>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const ArenaRange& x, const ArenaRange& y) { return x.begin == y.begin && x.numel == y.numel; });
  };
  if (!shard.empty() && state_shard.params.defined())
    DPL_CHECK(state_shard.params.dim() == 1 && state_shard.params.numel() == numel && state_shard.grads.defined() &&
                  state_shard.grads.shape() == state_shard.params.shape() &&
                  state_shard.grads.dtype() == state_shard.params.dtype(),
              who, ": expected the shard's parameters and gradients as 1-D tensors of its ", numel, " elements");
  const auto same_tensor = [](const Tensor& a, const Tensor& b) {
    return a.defined() == b.defined() &&
           (!a.defined() || (a.shares_storage_with(b) && a.offset() == b.offset() && a.numel() == b.numel()));
  };
  const bool same_buffers =
      same_tensor(rule_.shard_params_, state_shard.params) && same_tensor(rule_.shard_grads_, state_shard.grads);
  if (rule_.shard_numel_ == numel && same(rule_.shard_, shard) && same_buffers) return;
  rule_.shard_ = shard;
  rule_.shard_params_ = shard.empty() ? Tensor() : state_shard.params;
  rule_.shard_grads_ = shard.empty() ? Tensor() : state_shard.grads;
  sum_over_ranks_ = shard.empty() ? nullptr : state_shard.sum_over_ranks;
  rule_.shard_state_begin_ = std::move(state_begin);
  rule_.shard_numel_ = numel;
  if (target_ == nullptr) return;
  // A new shard is a new layout: the state starts again from zero.
  nn::ParameterArena& arena = target().arena();
  rule_.init_state(arena);
  state_arena_ = arena.id();
  rule_.lay_out_groups(arena);
}

void RuleStage::add_gradient_hook(GradientHook hook, bool device_only, ShardedGradientHook sharded) {
  DPL_CHECK(static_cast<bool>(hook), "Optimizer::add_gradient_hook: expected a callable hook, got an empty one");
  DPL_CHECK(rule_.shard_numel_ < 0 || static_cast<bool>(sharded), "Optimizer::add_gradient_hook: the optimizer state ",
            "is sharded between ranks, and a gradient hook without a sharded form would see only this rank's shard of ",
            "the averaged gradient; give its sharded form too (clip_gradients does)");
  DPL_CHECK(device_only || !replay_, "Optimizer::add_gradient_hook: a hook that is not device-only cannot join a ",
            "step in replay mode; leave replay mode first");
  hooks_.push_back(std::move(hook));
  sharded_hooks_.push_back(std::move(sharded));
  if (!device_only) ++host_hooks_;
}

void RuleStage::run_hooks(nn::ParameterArena& arena) {
  if (hooks_.empty()) return;
  if (rule_.shard_numel_ < 0) {
    for (const GradientHook& hook : hooks_) hook(arena);
    return;
  }
  GradientShard shard;
  if (rule_.shard_grads_.defined()) {
    shard.grads.push_back(rule_.shard_grads_);
  } else {
    for (const ArenaRange& r : rule_.shard_) shard.grads.push_back(arena.grads().narrow(0, r.begin, r.numel));
  }
  shard.sum_over_ranks = sum_over_ranks_ ? sum_over_ranks_ : [](Tensor&) {};
  for (const ShardedGradientHook& hook : sharded_hooks_) hook(shard);
}

// --- replay mode ---------------------------------------------------------------------------------

std::string RuleStage::replay_refusal() const {
  if (rule_.replay_values().empty())
    return "this optimizer's step() does not take its values from the device (replay_values() is empty)";
  if (host_hooks_ > 0)
    return "a gradient hook that is not device-only may read values back between the gradients and the step";
  return {};
}

void RuleStage::set_replay_mode(bool on, const Tensor& skip_flag) {
  // Either way the deferred protocol ends here, and replay mode lowers the flag: a verdict still
  // pending is read first.
  settle_replay();
  if (!on) {
    // The buffers stay: a recording made before reads them, and a step run unrecorded in
    // between (CapturedStep's odd batch) must find them in place when replay mode returns.
    replay_ = false;
    return;
  }
  const std::string why = replay_refusal();
  DPL_CHECK(why.empty(), "Optimizer::set_replay_mode: this optimizer cannot run a recorded step: ", why);
  nn::ParameterArena& arena = target().arena();
  // The state is laid out by the first update; a recorded step must find it in place.
  lay_out_state(arena);
  const Device device = arena.device();
  const auto n_values = static_cast<std::int64_t>(rule_.replay_values().size());
  if (!replay_values_.defined() || replay_values_.numel() != n_values || replay_values_.device() != device)
    replay_values_ = Tensor::zeros({n_values}, TensorOptions(kFloat32, device));
  own_replay_flag_ = false;
  if (skip_flag.defined()) {
    DPL_CHECK(skip_flag.dtype() == kFloat32 && skip_flag.numel() == 1 && skip_flag.device() == device,
              "Optimizer::set_replay_mode: expected a one-element float32 flag on ", device, ", got ", skip_flag.dtype(),
              " of shape ", shape_str(skip_flag.shape()), " on ", skip_flag.device());
    replay_skip_ = skip_flag;
  } else if (non_finite_ != NonFinitePolicy::kOff) {
    // The flag prepare_gradients() raises, made now so that the recording and every replay use
    // the same buffer.
    replay_skip_ = reset_non_finite_flag(device);
    own_replay_flag_ = true;
  } else {
    replay_skip_ = Tensor();
  }
  prepared_ = false;
  replay_ = true;
}

void RuleStage::prepare_replay() {
  DPL_CHECK(replay_, "Optimizer::prepare_replay: not in replay mode (call set_replay_mode(true) first)");
  DPL_CHECK(target().arena().id() == state_arena_, "Optimizer::prepare_replay: the model's parameters changed since ",
            "the step was recorded; leave replay mode and record it again");
  // Queued in stream order, after the previous replay that read the old values.
  backend::write_values(replay_values_, rule_.replay_values());
}

void RuleStage::finish_replay() {
  DPL_CHECK(replay_, "Optimizer::finish_replay: not in replay mode");
  loss_ = replay_loss_;
  if (!admit_step(target().arena().grads())) return;
  ++rule_.t_;
  rule_.on_step_taken();
}

bool RuleStage::can_defer_verdict() const {
  return replay_ && own_replay_flag_ && non_finite_ == NonFinitePolicy::kStop;
}

void RuleStage::finish_replay_deferred(const Tensor& loss) {
  // Queued before the previous verdict is awaited, so this run's read is under way meanwhile.
  std::shared_ptr<backend::PendingRead> next = backend::read_back_start(replay_skip_);
  settle_replay();
  pending_verdict_ = std::move(next);
  pending_loss_ = loss;
  loss_ = Tensor();
  finite_.reset();
  count_replayed_step(true);
}

void RuleStage::settle_replay() {
  if (pending_verdict_ == nullptr) return;
  const std::shared_ptr<backend::PendingRead> read = std::move(pending_verdict_);  // leaves it null
  const Tensor loss = std::move(pending_loss_);
  pending_loss_ = Tensor();
  if (read->wait().at(0) == 0.f) return;
  // Counted as taken, it was not: the counters go back to what update() leaves at a stop (the
  // failing iteration counted, t() and the state's steps not).
  --rule_.t_;
  rule_.on_step_withdrawn();
  last_skipped_ = true;
  DPL_FAIL(non_finite_message(
      iteration_, "", "", non_finite::loss_words(loss),
      "not located: its verdict was read after the next recorded step had begun, which skipped too"));
}

void RuleStage::count_replayed_step(bool taken) {
  prepared_ = false;
  // A wrapper that skips a step never calls the wrapped update(), so nothing is counted here.
  if (!taken) return;
  ++iteration_;
  last_skipped_ = false;
  ++rule_.t_;
  rule_.on_step_taken();
}

std::vector<Tensor> RuleStage::prepare_gradients() {
  const Tensor grads = target().arena().grads();
  prepared_ = true;
  if (non_finite_ == NonFinitePolicy::kOff) {
    drop_non_finite_flag();
    return {grads};
  }
  if (can_defer_verdict()) {
    // A recorded step under kStop leaves the flag raised once raised (set_replay_mode zeroed it):
    // a run queued before the verdict on the one before it was read must skip too.
    flag_ = replay_skip_;
    finite_.reset();
  } else {
    reset_non_finite_flag(grads.device());
  }
  backend::flag_non_finite(grads, flag_);
  return {grads, flag_};
}

std::vector<Tensor> RuleStage::adopt_prepared_gradients(const Tensor& flag) {
  const Tensor grads = target().arena().grads();
  prepared_ = true;
  if (non_finite_ == NonFinitePolicy::kOff) {
    drop_non_finite_flag();
    return {grads};
  }
  return {grads, adopt_non_finite_flag(flag, grads.device())};
}

}  // namespace dpl::optim
