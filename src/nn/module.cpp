#include "dpl/nn/module.hpp"

#include <algorithm>
#include <unordered_set>

namespace dpl::nn {

void Module::check_new_name(const std::string& name) const {
  DPL_CHECK(!name.empty() && name.find('.') == std::string::npos,
            "Module: expected a non-empty name without '.', got '", name, "'");
  for (const auto& p : params_) DPL_CHECK(p.first != name, "Module: the name '", name, "' is already registered");
  for (const auto& c : children_) DPL_CHECK(c.first != name, "Module: the name '", name, "' is already registered");
}

Variable Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  Variable v(std::move(value), true);
  params_.emplace_back(name, v);
  return v;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  DPL_CHECK(module != nullptr, "Module: sub-module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, var] : params_) out.emplace_back(prefix + name, var);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  collect("", out);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // A module registered twice (weight sharing) lists its parameters once, under the first name.
  std::unordered_set<const void*> seen;
  out.erase(std::remove_if(out.begin(), out.end(), [&](const auto& p) { return !seen.insert(p.second.id()).second; }),
            out.end());
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& p : named_parameters()) out.push_back(p.second);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

ParameterArena& Module::arena(bool* repacked) {
  const auto named = named_parameters();
  const bool stale = !arena_ || !arena_->binds(named);
  if (stale) arena_ = std::make_shared<ParameterArena>(ParameterArena::pack(named));
  if (repacked) *repacked = stale;
  return *arena_;
}

void Module::zero_grad() { arena().zero_grads(); }

void Module::to(Device device) {
  for (auto& [name, var] : named_parameters()) var.set_data(var.data().to(device));
  arena_.reset();
  arena();
}

Device Module::device() const {
  const auto named = named_parameters();
  return named.empty() ? Device::cpu() : named.front().second.device();
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.second.numel();
  return n;
}

}  // namespace dpl::nn
