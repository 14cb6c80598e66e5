#include "dpl/nn/module.hpp"

#include <atomic>
#include <functional>
#include <typeinfo>
#include <unordered_set>

#include "dpl/nn/any_module.hpp"

namespace dpl::nn {

namespace {
// Counts registrations on every module of the process. A module's cached arena is valid while
// neither this count nor Variable::rebind_count() has moved; when one has, the arena is checked
// against the parameters again (and repacked only if they really changed). A process-wide
// count is what lets a parent notice a registration deep inside a sub-module without parent links.
std::atomic<std::uint64_t> g_registrations{1};

void note_registration() { g_registrations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

Variable Module::forward(const Variable&) {
  DPL_FAIL("Module: ", type_name(typeid(*this)), " has no forward(const Variable&): its forward takes other "
           "inputs; call that forward on the module's own type, or hold the module in an nn::AnyModule, whose "
           "forward(...) takes any arguments and checks them");
}

void Module::check_new_name(const std::string& name) const {
  DPL_CHECK(!name.empty() && name.find('.') == std::string::npos,
            "Module: expected a non-empty name without '.', got '", name, "'");
  auto taken = [&name](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  DPL_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "Module: the name '", name,
            "' is already registered");
}

Variable Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  DPL_CHECK(value.defined(), "Module: parameter '", name, "' has no value");
  Variable v(std::move(value), true);
  order_.push_back({Kind::kParameter, params_.size()});
  params_.emplace_back(name, v);
  note_registration();
  return v;
}

Variable Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  DPL_CHECK(value.defined(), "Module: buffer '", name, "' has no value");
  Variable v(std::move(value), false);
  order_.push_back({Kind::kBuffer, buffers_.size()});
  buffers_.emplace_back(name, v);
  note_registration();
  return v;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  DPL_CHECK(module != nullptr, "Module: sub-module '", name, "' is null");
  order_.push_back({Kind::kModule, children_.size()});
  children_.emplace_back(name, std::move(module));
  note_registration();
}

void Module::collect(Kind kind, const std::string& prefix,
                     std::vector<std::pair<std::string, Variable>>& out) const {
  for (const Slot& slot : order_) {
    if (slot.kind == Kind::kModule) {
      const auto& [name, child] = children_[slot.index];
      child->collect(kind, prefix + name + ".", out);
    } else if (slot.kind == kind) {
      const auto& [name, var] = (kind == Kind::kParameter ? params_ : buffers_)[slot.index];
      out.emplace_back(prefix + name, var);
    }
  }
}

std::vector<std::pair<std::string, Variable>> Module::listed_once(Kind kind) const {
  std::vector<std::pair<std::string, Variable>> all;
  collect(kind, "", all);
  // A module registered twice (weight sharing) lists its entries once, under the first name.
  std::unordered_set<const void*> seen;
  std::vector<std::pair<std::string, Variable>> out;
  out.reserve(all.size());
  for (auto& entry : all)
    if (seen.insert(entry.second.id()).second) out.push_back(std::move(entry));
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  std::unordered_set<const Module*> seen{this};
  // Depth first, in registration order: each module's children right after it.
  std::function<void(Module&, const std::string&)> visit = [&](Module& m, const std::string& prefix) {
    for (const auto& [name, child] : m.children_) {
      if (!seen.insert(child.get()).second) continue;
      out.emplace_back(prefix + name, child.get());
      visit(*child, prefix + name + ".");
    }
  };
  visit(*this, "");
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;
  std::function<void(Module&)> visit = [&](Module& m) {
    for (const auto& [name, child] : m.children_)
      if (seen.insert(child.get()).second) visit(*child);
    fn(m);
  };
  seen.insert(this);
  visit(*this);
  return *this;
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  return listed_once(Kind::kParameter);
}

std::vector<std::pair<std::string, Variable>> Module::named_buffers() const { return listed_once(Kind::kBuffer); }

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
  const std::uint64_t registrations = g_registrations.load(std::memory_order_relaxed);
  const std::uint64_t rebinds = Variable::rebind_count();
  bool packed = false;
  if (!arena_ || registrations != arena_registrations_ || rebinds != arena_rebinds_) {
    const auto named = named_parameters();
    if (!arena_ || !arena_->binds(named)) {
      arena_ = std::make_shared<ParameterArena>(ParameterArena::pack(named));
      packed = true;
    }
    // Read after pack(), whose own rebinding of every parameter must not count as a change.
    arena_registrations_ = g_registrations.load(std::memory_order_relaxed);
    arena_rebinds_ = Variable::rebind_count();
  }
  if (repacked) *repacked = packed;
  return *arena_;
}

void Module::zero_grad() { arena().zero_grads(); }

void Module::to(Device device) {
  for (auto& [name, var] : named_parameters()) var.set_data(var.data().to(device));
  for (auto& [name, var] : named_buffers()) var.set_data(var.data().to(device));
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
