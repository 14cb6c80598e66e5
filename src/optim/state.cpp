// Exporting and restoring an optimizer's state (checkpoints).
#include "dpl/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "dpl/optim/rules.hpp"
#include "optim/rule_stage.hpp"

namespace dpl::optim {

namespace {
// Counts travel as doubles; those up to 2^53 are exact, which bounds what is accepted.
std::int64_t whole_scalar(const char* who, const std::map<std::string, double>& scalars, const char* key) {
  const double v = scalars.at(key);
  DPL_CHECK(std::isfinite(v) && v >= 0.0 && v == std::floor(v) && v <= 9007199254740992.0, who, ": expected \"",
            key, "\" to be a whole number >= 0, got ", v);
  return static_cast<std::int64_t>(v);
}
// A fixed hyperparameter is a setting of the run: restoring a state saved under another value
// would silently change the run, so it must match instead.
void check_same_setting(const char* who, const std::map<std::string, double>& scalars, const char* key, float have) {
  const double saved = scalars.at(key);
  DPL_CHECK(saved == static_cast<double>(have), who, ": the state was saved with ", key, " = ", saved,
            ", but this optimizer has ", key, " = ", have);
}
}  // namespace

// The parameter groups are settings of the run, saved to be checked: "param_groups" (only when
// there are groups, so that states saved without them keep their keys) and, for each group, its
// lr as a share of the optimizer's and its weight decay, -1 for one that follows the optimizer's.
std::map<std::string, double> RuleStage::group_scalars() const {
  std::map<std::string, double> out;
  if (rule_.groups_.empty()) return out;
  out["param_groups"] = static_cast<double>(rule_.groups_.size());
  for (std::size_t g = 0; g < rule_.groups_.size(); ++g) {
    const Optimizer::Group& group = rule_.groups_[g];
    const std::string prefix = "param_group" + std::to_string(g + 1) + "/";
    out[prefix + "lr_share"] = group.lr_share ? static_cast<double>(*group.lr_share) : -1.0;
    out[prefix + "weight_decay"] = group.settings.weight_decay() ? static_cast<double>(*group.settings.weight_decay()) : -1.0;
  }
  return out;
}

std::map<std::string, double> RuleStage::state_scalars() const {
  std::map<std::string, double> out = {
      {"t", static_cast<double>(rule_.t())}, {"lr", rule_.lr()}, {"weight_decay", rule_.weight_decay()}};
  rule_.add_own_scalars(out);
  const std::map<std::string, double> groups = group_scalars();
  out.insert(groups.begin(), groups.end());
  return out;
}

void RuleStage::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, double>& scalars) {
  const char* who = "Optimizer::load_state";
  // A verdict still pending would otherwise be applied to the loaded counters.
  settle_replay();
  nn::ParameterArena& arena = target().arena();
  // The state to fill must have the model's current layout, as the next update() would make it.
  lay_out_state(arena);

  const auto live = state();
  // Sharded, the live per-element state holds this rank's shard: a tensor of the whole arena
  // (what gathered_state() saved) gives that shard's pieces.
  std::vector<std::pair<std::string, Tensor>> own = tensors;
  if (rule_.shard_numel_ > 0) {
    for (auto& [name, src] : own) {
      const auto it = std::find_if(live.begin(), live.end(), [&wanted = name](const auto& e) { return e.first == wanted; });
      if (it != live.end() && src.defined() && it->second.numel() == rule_.shard_numel_ && src.dim() == 1 &&
          src.numel() == arena.numel())
        src = gather_ranges(src, rule_.shard_);
    }
  }
  const std::vector<std::pair<std::string, Tensor>>& tensors_in = own;
  for (const auto& [name, src] : tensors_in) {
    const auto it = std::find_if(live.begin(), live.end(), [&wanted = name](const auto& e) { return e.first == wanted; });
    DPL_CHECK(it != live.end(), who, ": unexpected state tensor '", name, "'");
    DPL_CHECK(src.defined() && src.dtype() == it->second.dtype() && src.shape() == it->second.shape(), who,
              ": state tensor '", name, "' must be ", it->second.dtype(), " of shape ", shape_str(it->second.shape()),
              " (the model's parameter layout), got ",
              src.defined() ? detail::concat(src.dtype(), " of shape ", shape_str(src.shape())) : "undefined");
  }
  for (const auto& [name, dst] : live) {
    // Named in the capture: C++17 lets no lambda capture a structured binding implicitly
    // (clang refuses it, which the sanitizer and fuzzing builds use).
    const bool given =
        std::any_of(tensors.begin(), tensors.end(), [&wanted = name](const auto& e) { return e.first == wanted; });
    DPL_CHECK(given, who, ": missing state tensor '", name, "'");
  }
  // The groups first, so that a state saved with other groups is told as that, not as a key.
  const std::map<std::string, double> groups = group_scalars();
  const auto saved_groups = scalars.count("param_groups") == 1 ? scalars.at("param_groups") : 0.0;
  const auto have_groups = static_cast<double>(rule_.groups_.size());
  DPL_CHECK(saved_groups == have_groups, who, ": the state was saved with ", saved_groups,
            " parameter group(s) besides the default one, but this optimizer has ", have_groups);
  for (const auto& [key, value] : groups) {
    const auto found = scalars.find(key);
    DPL_CHECK(found != scalars.end() && found->second == value, who, ": parameter group setting '", key, "' was saved as ",
              found == scalars.end() ? std::string("nothing") : std::to_string(found->second), ", but this optimizer has ",
              value, " (-1: follows the optimizer's)");
  }
  const auto keys = state_scalars();
  for (const auto& [key, value] : scalars) DPL_CHECK(keys.count(key) == 1, who, ": unexpected state scalar '", key, "'");
  for (const auto& [key, value] : keys) DPL_CHECK(scalars.count(key) == 1, who, ": missing state scalar '", key, "'");

  const std::int64_t t = whole_scalar(who, scalars, "t");
  const double lr = scalars.at("lr"), rate = scalars.at("weight_decay");
  DPL_CHECK(std::isfinite(lr) && lr >= 0.0, who, ": expected \"lr\" to be finite and >= 0, got ", lr);
  DPL_CHECK(std::isfinite(rate) && rate >= 0.0, who, ": expected \"weight_decay\" to be finite and >= 0, got ", rate);
  rule_.load_own_scalars(scalars);

  rule_.t_ = t;
  rule_.set_lr(static_cast<float>(lr));
  rule_.set_weight_decay(static_cast<float>(rate));
  for (const auto& [name, dst] : live) {
    Tensor into = dst;
    for (const auto& [given, src] : tensors_in)
      if (given == name) into.copy_(src);
  }
}

void MomentumSGD::add_own_scalars(std::map<std::string, double>& out) const { out["momentum"] = momentum_; }

void MomentumSGD::load_own_scalars(const std::map<std::string, double>& scalars) {
  check_same_setting("MomentumSGD::load_state", scalars, "momentum", momentum_);
}

void MomentOptimizer::add_own_scalars(std::map<std::string, double>& out) const {
  out["moment_steps"] = static_cast<double>(moment_steps_);
  out["beta1"] = beta1_;
  out["beta2"] = beta2_;
  out["eps"] = eps_;
}

void MomentOptimizer::load_own_scalars(const std::map<std::string, double>& scalars) {
  const std::string who = std::string(who_) + "::load_state";
  check_same_setting(who.c_str(), scalars, "beta1", beta1_);
  check_same_setting(who.c_str(), scalars, "beta2", beta2_);
  check_same_setting(who.c_str(), scalars, "eps", eps_);
  moment_steps_ = whole_scalar(who.c_str(), scalars, "moment_steps");
}

void RMSprop::add_own_scalars(std::map<std::string, double>& out) const {
  out["alpha"] = options_.alpha();
  out["eps"] = options_.eps();
  out["momentum"] = options_.momentum();
  out["centered"] = options_.centered() ? 1.0 : 0.0;
}

void RMSprop::load_own_scalars(const std::map<std::string, double>& scalars) {
  const char* who = "RMSprop::load_state";
  check_same_setting(who, scalars, "alpha", options_.alpha());
  check_same_setting(who, scalars, "eps", options_.eps());
  check_same_setting(who, scalars, "momentum", options_.momentum());
  check_same_setting(who, scalars, "centered", options_.centered() ? 1.f : 0.f);
}

void Adagrad::add_own_scalars(std::map<std::string, double>& out) const {
  out["sum_steps"] = static_cast<double>(sum_steps_);
  out["lr_decay"] = options_.lr_decay();
  out["eps"] = options_.eps();
  out["initial_accumulator_value"] = options_.initial_accumulator_value();
}

void Adagrad::load_own_scalars(const std::map<std::string, double>& scalars) {
  const char* who = "Adagrad::load_state";
  check_same_setting(who, scalars, "lr_decay", options_.lr_decay());
  check_same_setting(who, scalars, "eps", options_.eps());
  check_same_setting(who, scalars, "initial_accumulator_value", options_.initial_accumulator_value());
  sum_steps_ = whole_scalar(who, scalars, "sum_steps");
}

void LARS::add_own_scalars(std::map<std::string, double>& out) const {
  out["momentum"] = options_.momentum();
  out["trust_coefficient"] = options_.trust_coefficient();
}

void LARS::load_own_scalars(const std::map<std::string, double>& scalars) {
  const char* who = "LARS::load_state";
  check_same_setting(who, scalars, "momentum", options_.momentum());
  check_same_setting(who, scalars, "trust_coefficient", options_.trust_coefficient());
}

}  // namespace dpl::optim
