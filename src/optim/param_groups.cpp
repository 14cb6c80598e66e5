// Parameter groups: which group each of the arena's parameters is in, and the contiguous ranges
// of the arena that one update launch each covers.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/optim/optimizer.hpp"
#include "optim/rule_stage.hpp"
#include "optim/update_rule.hpp"

namespace dpl::optim {

namespace {
void check_rate(const char* what, const std::optional<float>& value, const std::string& label) {
  if (!value) return;
  DPL_CHECK(std::isfinite(*value) && *value >= 0.f, "Optimizer::add_param_group: expected a finite ", what,
            " >= 0 for group '", label, "', got ", *value);
}

// A few of the model's names, for a message about a name or a group that matched none.
std::string some_names(const std::vector<nn::ArenaEntry>& entries) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(entries.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) out += (i > 0 ? ", " : "") + entries[i].name;
  if (entries.size() > shown) out += ", ... (" + std::to_string(entries.size()) + " in all)";
  return out.empty() ? "none" : out;
}
}  // namespace

ParamGroup ParamGroup::named(std::vector<std::string> names, std::string label) {
  const std::set<std::string> wanted(names.begin(), names.end());
  ParamGroup group([wanted](const std::string& name, const Shape&) { return wanted.count(name) == 1; },
                   std::move(label));
  group.names_ = std::move(names);
  return group;
}

ParamGroup ParamGroup::one_dimensional(std::string label) {
  return ParamGroup([](const std::string&, const Shape& shape) { return shape.size() <= 1; }, std::move(label));
}

void Optimizer::add_param_group(ParamGroup group) {
  Optimizer& rule = *rule_;
  const std::string& label = group.label();
  DPL_CHECK(static_cast<bool>(group.selects()), "Optimizer::add_param_group: group '", label,
            "' has no predicate (an empty ParameterPredicate)");
  DPL_CHECK(!rule.step_values(rule.lr(), rule.weight_decay()).empty(), "Optimizer::add_param_group: this ",
            "optimizer's rule has no parameter groups (a rule of one's own must implement step_values())");
  DPL_CHECK(!replay_mode(), "Optimizer::add_param_group: not in replay mode: the recorded step has the groups it was ",
            "recorded with; leave replay mode, add the group, and record again");
  check_rate("lr", group.lr(), label);
  check_rate("weight_decay", group.weight_decay(), label);
  std::optional<float> share;
  if (group.lr()) {
    DPL_CHECK(rule.lr() > 0.f, "Optimizer::add_param_group: group '", label, "' sets lr ", *group.lr(),
              ", which is kept as a share of the optimizer's lr, but the optimizer's lr is 0; give the optimizer ",
              "its lr first");
    share = *group.lr() / rule.lr();
  }
  rule.groups_.push_back({std::move(group), share});
  ++rule.groups_version_;
}

float Optimizer::group_lr(std::size_t g) const {
  if (g == 0 || !groups_.at(g - 1).lr_share) return lr();
  return *groups_[g - 1].lr_share * lr();
}

float Optimizer::group_weight_decay(std::size_t g) const {
  if (g == 0 || !groups_.at(g - 1).settings.weight_decay()) return weight_decay();
  return *groups_[g - 1].settings.weight_decay();
}

const std::vector<std::size_t>& Optimizer::entry_groups(const nn::ParameterArena& arena) const {
  if (arena.id() == groups_arena_ && entry_groups_version_ == groups_version_) return entry_groups_;
  const std::vector<nn::ArenaEntry>& entries = arena.entries();
  std::vector<std::size_t> groups(entries.size(), 0);
  std::vector<std::size_t> counts(groups_.size() + 1, 0);
  for (std::size_t s = 0; s < entries.size(); ++s) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].settings.selects()(entries[s].name, entries[s].shape)) {
        groups[s] = g + 1;
        break;
      }
    }
    ++counts[groups[s]];
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& settings = groups_[g].settings;
    for (const std::string& name : settings.names()) {
      const bool found = std::any_of(entries.begin(), entries.end(), [&](const nn::ArenaEntry& e) { return e.name == name; });
      DPL_CHECK(found, "Optimizer: parameter group '", settings.label(), "' names '", name,
                "', which the model does not have; its parameters are: ", some_names(entries));
    }
    DPL_CHECK(counts[g + 1] > 0, "Optimizer: parameter group '", settings.label(), "' selects no parameter of the ",
              "model (the groups added before it take the parameters they select first); the model's parameters ",
              "are: ", some_names(entries));
  }
  entry_groups_ = std::move(groups);
  groups_arena_ = arena.id();
  entry_groups_version_ = groups_version_;
  return entry_groups_;
}

namespace {
// The parts of ranges inside the shard's ranges (both in arena order), in order.
std::vector<GroupRange> clipped(const std::vector<GroupRange>& ranges, const std::vector<ArenaRange>& shard) {
  std::vector<GroupRange> out;
  for (const GroupRange& r : ranges) {
    for (const ArenaRange& piece : shard) {
      const std::int64_t lo = std::max(r.begin, piece.begin), hi = std::min(r.begin + r.numel, piece.begin + piece.numel);
      if (hi <= lo) continue;
      GroupRange part = r;
      part.begin = lo;
      part.numel = hi - lo;
      out.push_back(part);
    }
  }
  return out;
}
}  // namespace

std::vector<GroupRange> Optimizer::group_ranges(const nn::ParameterArena& arena) const {
  std::vector<GroupRange> ranges = all_group_ranges(arena);
  return shard_numel_ < 0 ? ranges : clipped(ranges, shard_);
}

std::vector<GroupRange> Optimizer::all_group_ranges(const nn::ParameterArena& arena) const {
  if (groups_.empty()) return {{0, arena.numel(), 0, lr(), weight_decay()}};
  const std::vector<std::size_t>& groups = entry_groups(arena);
  const std::vector<nn::ArenaEntry>& entries = arena.entries();
  std::vector<GroupRange> ranges;
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (!ranges.empty() && ranges.back().group == groups[s]) continue;
    // A range starts where its first parameter does and runs to the next range (the padding
    // between parameters is zero and stays zero under every rule, whichever range takes it).
    const std::int64_t begin = ranges.empty() ? 0 : entries[s].offset;
    if (!ranges.empty()) ranges.back().numel = begin - ranges.back().begin;
    ranges.push_back({begin, 0, groups[s], group_lr(groups[s]), group_weight_decay(groups[s])});
  }
  if (!ranges.empty()) ranges.back().numel = arena.numel() - ranges.back().begin;
  return ranges;
}

Tensor Optimizer::RangeStep::state(const Tensor& arena_layout) const {
  return arena_layout.numel() == 0 ? arena_layout : arena_layout.narrow(0, state_begin, range.numel);
}

std::vector<Optimizer::RangeStep> Optimizer::range_steps(nn::ParameterArena& arena) const {
  // A group's values are the same for each of its ranges (which may be many: the 1-D parameters
  // of a ResNet alternate with the others), so they are computed once per group.
  std::vector<std::vector<float>> values(group_count());
  for (std::size_t g = 0; g < values.size(); ++g) values[g] = step_values(group_lr(g), group_weight_decay(g));
  std::vector<RangeStep> out;
  for (const GroupRange& r : group_ranges(arena)) {
    RangeStep s;
    s.range = r;
    s.values = values[r.group];
    s.state_begin = r.begin;
    if (shard_numel_ >= 0) {
      // The shard's piece that holds the (clipped) range: the last one starting at or before it.
      const auto piece = std::upper_bound(shard_.begin(), shard_.end(), r.begin,
                                          [](std::int64_t at, const ArenaRange& p) { return at < p.begin; });
      const auto i = static_cast<std::size_t>(piece - shard_.begin()) - 1;
      s.state_begin = shard_state_begin_[i] + (r.begin - shard_[i].begin);
    }
    // A shard with buffers of its own (float32 masters) holds its elements as the state does.
    const bool own = shard_params_.defined();
    s.param = (own ? shard_params_ : arena.params()).narrow(0, own ? s.state_begin : r.begin, r.numel);
    s.grad = (own ? shard_grads_ : arena.grads()).narrow(0, own ? s.state_begin : r.begin, r.numel);
    s.device_values = detail::group_values(replay_mode(), replay_values_on_device(), r.group, s.values.size());
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<float> Optimizer::replay_values() const {
  std::vector<float> out;
  for (std::size_t g = 0; g < group_count(); ++g) {
    const std::vector<float> values = step_values(group_lr(g), group_weight_decay(g));
    if (values.empty()) return {};
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

std::vector<ParamGroupInfo> Optimizer::param_groups() const {
  const Optimizer& rule = *rule_;
  std::vector<ParamGroupInfo> out(rule.group_count());
  for (std::size_t g = 0; g < out.size(); ++g) {
    out[g].label = g == 0 ? "default" : rule.groups_[g - 1].settings.label();
    out[g].lr = rule.group_lr(g);
    out[g].weight_decay = rule.group_weight_decay(g);
  }
  if (!rule_stage().has_target()) return out;
  const nn::ParameterArena& arena = rule_stage().target().arena();
  const std::vector<std::size_t>& groups = rule.entry_groups(arena);
  for (std::size_t s = 0; s < groups.size(); ++s) out[groups[s]].parameters.push_back(arena.entries()[s].name);
  return out;
}

}  // namespace dpl::optim
