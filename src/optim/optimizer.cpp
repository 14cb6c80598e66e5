// Optimizer's step methods, each a call into its step pipeline, and the wrapper that chains a
// stage in front of another optimizer's pipeline.
#include "dpl/optim/optimizer.hpp"

#include <cmath>
#include <utility>

#include "dpl/autograd/ops/elementwise.hpp"
#include "dpl/core/error.hpp"
#include "optim/rule_stage.hpp"

namespace dpl::optim {

StepStage& StepStage::next() const {
  DPL_CHECK(next_ != nullptr, "StepStage: this stage is not chained in front of another");
  return *next_;
}

Variable StepStage::accumulate_gradients(const std::function<Variable(int)>& loss_fn, int micro_batches,
                                         const std::function<void(int, const Variable&)>& backward) {
  DPL_CHECK(micro_batches >= 1, "Optimizer::update: expected at least 1 micro-batch per step, got ", micro_batches);
  if (micro_batches == 1) {
    Variable loss = loss_fn(0);
    backward(0, loss);
    return loss;
  }
  // Each backward adds its gradients to the arena's; scaled by 1/k they add up to the mean over
  // the k micro-batches, the gradient of one batch k times as large.
  const float share = 1.0f / static_cast<float>(micro_batches);
  Variable sum;
  for (int i = 0; i < micro_batches; ++i) {
    Variable loss = loss_fn(i);
    DPL_CHECK(loss.data().defined() && loss.data().numel() == 1, "Optimizer::update: expected micro-batch ", i,
              "'s loss to be one value, got ", loss.data().defined() ? loss.data().numel() : 0, " values");
    backward(i, loss * share);
    const Variable value(loss.data());
    sum = sum.defined() ? sum + value : value;
  }
  return sum * share;
}

Tensor gather_ranges(const Tensor& whole, const std::vector<ArenaRange>& shard) {
  std::int64_t total = 0;
  for (const ArenaRange& r : shard) {
    DPL_CHECK(whole.dim() == 1 && r.begin >= 0 && r.numel >= 0 && r.begin + r.numel <= whole.numel(),
              "gather_ranges: expected the range [", r.begin, ", ", r.begin + r.numel, ") inside a 1-D tensor, got ",
              "one of shape ", shape_str(whole.shape()));
    total += r.numel;
  }
  Tensor out = Tensor::empty({total}, TensorOptions(whole.dtype(), whole.device()));
  std::int64_t at = 0;
  for (const ArenaRange& r : shard) {
    if (r.numel > 0) out.narrow(0, at, r.numel).copy_(whole.narrow(0, r.begin, r.numel));
    at += r.numel;
  }
  return out;
}

Optimizer::Optimizer() : own_stage_(std::make_unique<RuleStage>(*this)), front_(own_stage_.get()), rule_(this) {}
Optimizer::Optimizer(StepStage& front, Optimizer& rule) : front_(&front), rule_(&rule) {}
Optimizer::~Optimizer() = default;

RuleStage& Optimizer::rule_stage() const { return *rule_->own_stage_; }

float Optimizer::weight_decay() const { return rule_->weight_decay_; }
void Optimizer::set_weight_decay(float rate) {
  DPL_CHECK(std::isfinite(rate) && rate >= 0.f, "Optimizer::set_weight_decay: expected a finite rate >= 0, got ",
            rate);
  rule_->weight_decay_ = rate;
}
std::int64_t Optimizer::t() const { return rule_->t_; }

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const { return front_->state(); }
std::vector<std::pair<std::string, Tensor>> Optimizer::gathered_state() { return front_->gathered_state(); }
const std::vector<ArenaRange>& Optimizer::state_shard() const { return rule_->shard_; }
std::int64_t Optimizer::state_shard_numel() const { return rule_->shard_numel_; }
Tensor Optimizer::state_zeros(const nn::ParameterArena& arena) const {
  const Tensor& p = shard_params_.defined() ? shard_params_ : arena.params();
  const std::int64_t n = shard_numel_ < 0 ? p.numel() : shard_numel_;
  return Tensor::zeros({n}, TensorOptions(p.dtype(), p.device()));
}
std::map<std::string, double> Optimizer::state_scalars() const { return front_->state_scalars(); }
void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, double>& scalars) {
  front_->load_state(tensors, scalars);
}

void Optimizer::setup(nn::Module& model) { front_->setup(model); }
void Optimizer::update() { front_->update(); }
Variable Optimizer::update(const std::function<Variable()>& loss_fn) {
  return front_->update([&](int /*micro_batch*/) { return loss_fn(); }, 1);
}
Variable Optimizer::update(const std::function<Variable(int)>& loss_fn, int micro_batches) {
  return front_->update(loss_fn, micro_batches);
}
void Optimizer::backward(const Variable& loss) { front_->backward(loss); }
std::vector<Tensor> Optimizer::prepare_gradients() { return front_->prepare_gradients(); }
GradientRanges Optimizer::gradient_ranges() { return front_->gradient_ranges(); }
std::vector<Tensor> Optimizer::adopt_prepared_gradients(const Tensor& flag) {
  return front_->adopt_prepared_gradients(flag);
}
bool Optimizer::gradients_finite() { return front_->gradients_finite(); }
bool Optimizer::stops_on_non_finite() const { return front_->stops_on_non_finite(); }
void Optimizer::zero_grad() { target().zero_grad(); }
void Optimizer::set_non_finite_policy(NonFinitePolicy policy) { front_->set_non_finite_policy(policy); }
NonFinitePolicy Optimizer::non_finite_policy() const { return front_->non_finite_policy(); }
std::int64_t Optimizer::iteration() const { return front_->iteration(); }
std::int64_t Optimizer::skipped_steps() const { return front_->skipped_steps(); }
bool Optimizer::last_step_skipped() const { return front_->last_step_skipped(); }
nn::Module& Optimizer::target() const { return front_->target(); }

// The hooks run where the rule reads its gradients: after any wrapper's stage (on the averaged,
// float32 master gradients).
void Optimizer::add_gradient_hook(GradientHook hook, bool device_only, ShardedGradientHook sharded) {
  rule_stage().add_gradient_hook(std::move(hook), device_only, std::move(sharded));
}
std::size_t Optimizer::gradient_hook_count() const { return rule_stage().gradient_hook_count(); }

std::string Optimizer::replay_refusal() const { return front_->replay_refusal(); }
void Optimizer::set_replay_mode(bool on) { front_->set_replay_mode(on, Tensor()); }
bool Optimizer::replay_mode() const { return front_->replay_mode(); }
void Optimizer::prepare_replay() { front_->prepare_replay(); }
void Optimizer::finish_replay() { front_->finish_replay(); }
bool Optimizer::can_defer_verdict() const { return front_->can_defer_verdict(); }
void Optimizer::finish_replay_deferred(const Tensor& loss) {
  DPL_CHECK(can_defer_verdict(), "Optimizer::finish_replay_deferred: expected replay mode under the non-finite ",
            "policy 'stop' with the optimizer's own flag (can_defer_verdict()); use finish_replay()");
  rule_stage().finish_replay_deferred(loss);
}
// A wrapper never defers, so under one these find nothing pending.
void Optimizer::settle_replay() { rule_stage().settle_replay(); }
bool Optimizer::verdict_pending() const { return rule_stage().verdict_pending(); }

const Tensor& Optimizer::replay_values_on_device() const { return rule_stage().replay_values_on_device(); }
const Tensor& Optimizer::replay_skip_flag() const { return rule_stage().replay_skip_flag(); }

Optimizer& OptimizerWrapper::checked(const char* who, const std::unique_ptr<Optimizer>& actual) {
  DPL_CHECK(actual != nullptr, who, ": the wrapped optimizer is null");
  return *actual;
}

OptimizerWrapper::OptimizerWrapper(const char* who, std::unique_ptr<Optimizer> actual,
                                   std::unique_ptr<StepStage> stage)
    : Optimizer(stage != nullptr ? *stage : *checked(who, actual).front_, *checked(who, actual).rule_),
      actual_(std::move(actual)),
      stage_(std::move(stage)) {
  if (stage_ != nullptr) stage_->next_ = actual_->front_;
}

OptimizerWrapper::~OptimizerWrapper() = default;

void OptimizerWrapper::step(nn::ParameterArena& arena) { actual_->step(arena); }

}  // namespace dpl::optim
