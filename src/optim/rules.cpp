// AdamW, RMSprop, Adagrad, LAMB and LARS (dpl/optim/rules.hpp); their checkpoint scalars are in
// state.cpp with the other rules'.
#include "dpl/optim/rules.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "optim/segments.hpp"
#include "optim/update_rule.hpp"

namespace dpl::optim {

using detail::check_lr;
using detail::source_of;
using detail::zeros_like;

namespace {
void check_rate(const char* who, const char* what, float value) {
  DPL_CHECK(std::isfinite(value) && value >= 0.f, who, ": expected a finite ", what, " >= 0, got ", value);
}
}  // namespace

// --- AdamW ---------------------------------------------------------------------------------------

AdamW::AdamW(const AdamWOptions& o) : MomentOptimizer("AdamW", o.lr(), o.betas().first, o.betas().second, o.eps()) {
  set_weight_decay(o.weight_decay());
}
std::vector<float> AdamW::step_values(float lr, float weight_decay) const {
  // PyTorch's scalars: step_size = lr / bias_correction1, and the square root of bias_correction2.
  const double fix1 = bias_correction(beta1()), fix2 = bias_correction(beta2());
  return {lr, static_cast<float>(lr / fix1), static_cast<float>(std::sqrt(fix2)), beta1(), beta2(), eps(),
          weight_decay};
}
void AdamW::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena)) {
    Tensor m = s.state(m_), v = s.state(v_);
    const std::vector<float>& h = s.values;
    backend::adamw_update(s.param, s.grad, m, v, {h[0], h[1], h[2], h[3], h[4], h[5], h[6]},
                          source_of(replay_mode(), s.device_values, replay_skip_flag()));
  }
}

// --- RMSprop -------------------------------------------------------------------------------------

RMSprop::RMSprop(const RMSpropOptions& o) : options_(o) {
  check_lr("RMSprop", o.lr());
  DPL_CHECK(o.alpha() >= 0.f && o.alpha() <= 1.f, "RMSprop: expected alpha in [0, 1], got ", o.alpha());
  DPL_CHECK(o.eps() > 0.f, "RMSprop: expected eps > 0, got ", o.eps());
  DPL_CHECK(o.momentum() >= 0.f && o.momentum() < 1.f, "RMSprop: expected momentum in [0, 1), got ", o.momentum());
  set_weight_decay(o.weight_decay());
}
void RMSprop::set_lr(float lr) {
  check_lr("RMSprop", lr);
  options_.lr(lr);
}
std::vector<std::pair<std::string, Tensor>> RMSprop::own_state() const {
  std::vector<std::pair<std::string, Tensor>> out = {{"square_avg", square_avg_}};
  if (options_.momentum() > 0.f) out.emplace_back("momentum_buffer", momentum_buffer_);
  if (options_.centered()) out.emplace_back("grad_avg", grad_avg_);
  return out;
}
void RMSprop::init_state(const nn::ParameterArena& arena) {
  const Tensor& p = arena.params();
  // A state the settings do not use stays empty: the kernel never reads it.
  const Tensor none = Tensor::zeros({0}, TensorOptions(p.dtype(), p.device()));
  square_avg_ = state_zeros(arena);
  momentum_buffer_ = options_.momentum() > 0.f ? state_zeros(arena) : none;
  grad_avg_ = options_.centered() ? state_zeros(arena) : none;
}
std::vector<float> RMSprop::step_values(float lr, float weight_decay) const {
  return {lr, options_.alpha(), options_.eps(), weight_decay, options_.momentum(), options_.centered() ? 1.f : 0.f};
}
void RMSprop::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena)) {
    Tensor square_avg = s.state(square_avg_), buf = s.state(momentum_buffer_), grad_avg = s.state(grad_avg_);
    const std::vector<float>& h = s.values;
    backend::rmsprop_update(s.param, s.grad, square_avg, buf, grad_avg, {h[0], h[1], h[2], h[3], h[4], h[5]},
                            source_of(replay_mode(), s.device_values, replay_skip_flag()));
  }
}

// --- Adagrad -------------------------------------------------------------------------------------

Adagrad::Adagrad(const AdagradOptions& o) : options_(o) {
  check_lr("Adagrad", o.lr());
  check_rate("Adagrad", "lr_decay", o.lr_decay());
  check_rate("Adagrad", "initial_accumulator_value", o.initial_accumulator_value());
  DPL_CHECK(o.eps() > 0.f, "Adagrad: expected eps > 0, got ", o.eps());
  set_weight_decay(o.weight_decay());
}
void Adagrad::set_lr(float lr) {
  check_lr("Adagrad", lr);
  options_.lr(lr);
}
void Adagrad::init_state(const nn::ParameterArena& arena) {
  sum_ = state_zeros(arena);
  sum_steps_ = 0;
  // Only the parameters' slots start at the initial value: the padding between them stays zero,
  // as in every arena.
  if (options_.initial_accumulator_value() == 0.f) return;
  // Sharded, sum_ holds the shard's pieces of the arena one after the other.
  std::vector<ArenaRange> pieces = state_shard();
  if (pieces.empty()) pieces.push_back({0, sum_.numel()});
  std::int64_t at = 0;
  for (const ArenaRange& piece : pieces) {
    const std::int64_t begin = piece.begin, end = begin + piece.numel;
    for (const nn::ArenaEntry& e : arena.entries()) {
      const std::int64_t lo = std::max(e.offset, begin), hi = std::min(e.offset + e.numel, end);
      if (hi > lo) sum_.narrow(0, at + lo - begin, hi - lo).fill_(options_.initial_accumulator_value());
    }
    at += piece.numel;
  }
}
std::vector<float> Adagrad::step_values(float lr, float weight_decay) const {
  const double clr = lr / (1.0 + static_cast<double>(sum_steps_) * options_.lr_decay());
  return {static_cast<float>(clr), weight_decay, options_.eps()};
}
void Adagrad::step(nn::ParameterArena& arena) {
  for (RangeStep& s : range_steps(arena)) {
    Tensor sum = s.state(sum_);
    backend::adagrad_update(s.param, s.grad, sum, {s.values[0], s.values[1], s.values[2]},
                            source_of(replay_mode(), s.device_values, replay_skip_flag()));
  }
}

// --- LAMB ----------------------------------------------------------------------------------------

namespace {
// Rebuilds the per-group chunk tables when the arena or the group of some entry changed.
void refresh_tables(GroupSegmentTables& tables, const nn::ParameterArena& arena,
                    const std::vector<std::size_t>& entry_groups, std::size_t group_count,
                    const std::function<std::int32_t(const nn::ArenaEntry&)>& flags_of) {
  if (tables.arena == arena.id() && tables.entry_groups == entry_groups && tables.rows.size() == group_count) return;
  tables.rows.clear();
  tables.partials.clear();
  for (detail::SegmentTable& t : detail::segment_tables(arena, entry_groups, group_count, flags_of)) {
    tables.rows.push_back(t.rows);
    tables.partials.push_back(t.partials);
  }
  tables.arena = arena.id();
  tables.entry_groups = entry_groups;
}
}  // namespace

LAMB::LAMB(const LAMBOptions& o) : MomentOptimizer("LAMB", o.lr(), o.betas().first, o.betas().second, o.eps()) {
  set_weight_decay(o.weight_decay());
}
void LAMB::lay_out_groups(const nn::ParameterArena& arena) {
  refresh_tables(tables_, arena, entry_groups(arena), group_count(), {});
}
std::vector<float> LAMB::step_values(float lr, float weight_decay) const {
  return {lr, beta1(), beta2(), eps(), weight_decay, static_cast<float>(bias_correction(beta1())),
          static_cast<float>(bias_correction(beta2()))};
}
void LAMB::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  for (std::size_t g = 0; g < group_count(); ++g) {
    const std::vector<float> h = step_values(group_lr(g), group_weight_decay(g));
    const backend::LambHyper hyper{h[0], h[1], h[2], h[3], h[4], h[5], h[6]};
    const Tensor values = detail::group_values(replay_mode(), replay_values_on_device(), g, h.size());
    const backend::UpdateSource source = source_of(replay_mode(), values, replay_skip_flag());
    backend::lamb_moments(p, arena.grads(), m_, v_, tables_.rows[g], tables_.partials[g], hyper, source);
    backend::lamb_apply(p, m_, v_, tables_.rows[g], tables_.partials[g], hyper, source);
  }
}

// --- LARS ----------------------------------------------------------------------------------------

LARS::LARS(const LARSOptions& o) : options_(o) {
  check_lr("LARS", o.lr());
  DPL_CHECK(o.momentum() >= 0.f && o.momentum() < 1.f, "LARS: expected momentum in [0, 1), got ", o.momentum());
  DPL_CHECK(std::isfinite(o.trust_coefficient()) && o.trust_coefficient() > 0.f,
            "LARS: expected a finite trust_coefficient > 0, got ", o.trust_coefficient());
  set_weight_decay(o.weight_decay());
}
void LARS::set_lr(float lr) {
  check_lr("LARS", lr);
  options_.lr(lr);
}
void LARS::init_state(const nn::ParameterArena& arena) { velocity_ = zeros_like(arena.params()); }
void LARS::lay_out_groups(const nn::ParameterArena& arena) {
  const ParameterPredicate& exclude = options_.exclude();
  refresh_tables(tables_, arena, entry_groups(arena), group_count(), [&exclude](const nn::ArenaEntry& e) {
    return exclude && exclude(e.name, e.shape) ? backend::kSegmentExcluded : 0;
  });
}
std::vector<float> LARS::step_values(float lr, float weight_decay) const {
  return {lr, options_.momentum(), weight_decay, options_.trust_coefficient()};
}
void LARS::step(nn::ParameterArena& arena) {
  Tensor p = arena.params();
  for (std::size_t g = 0; g < group_count(); ++g) {
    const std::vector<float> h = step_values(group_lr(g), group_weight_decay(g));
    const Tensor values = detail::group_values(replay_mode(), replay_values_on_device(), g, h.size());
    backend::segment_norms(p, arena.grads(), tables_.rows[g], tables_.partials[g]);
    backend::lars_update(p, arena.grads(), velocity_, tables_.rows[g], tables_.partials[g], {h[0], h[1], h[2], h[3]},
                         source_of(replay_mode(), values, replay_skip_flag()));
  }
}

}  // namespace dpl::optim
