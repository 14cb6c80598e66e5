#pragma once
// Module: a layer or model with named parameters and sub-modules.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/nn/arena.hpp"

namespace dpl::nn {

/// Base class of layers and models. A module owns parameters (leaf Variables that require
/// gradients) and sub-modules, each under a name. Hierarchical names join with '.', as in
/// "layers.0.weight"; named_parameters() lists them sorted by that name, the same on every rank.
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The module's computation. Requires an input this module accepts (see each module).
  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }

  /// Every parameter of this module and its sub-modules, sorted by hierarchical name. A parameter
  /// reachable under several names (a shared sub-module) is listed once, under the first name.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  /// The values of named_parameters(), in the same order.
  std::vector<Variable> parameters() const;
  /// Direct sub-modules in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  /// Training mode on (default) or off; applies to sub-modules too.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// The flat parameter and gradient arenas of this module. Packs them on first use and again
  /// whenever the parameter set has changed since (a parameter added or its data replaced);
  /// `repacked` tells the caller that happened (optimizers then reset their state).
  ParameterArena& arena(bool* repacked = nullptr);
  /// Sets every gradient to zero (one fill over the gradient arena).
  void zero_grad();
  /// Moves every parameter to device, repacking the arenas there.
  void to(Device device);
  /// The device of the parameters (cpu for a module without parameters).
  Device device() const;
  /// Total number of parameter elements (no padding).
  std::int64_t num_parameters() const;

 protected:
  /// Registers a parameter initialised with value; returns the Variable (requires_grad on).
  /// Names must be unique within this module and contain no '.'.
  Variable register_parameter(const std::string& name, Tensor value);
  /// Registers a sub-module and returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;

  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<ParameterArena> arena_;
  bool training_ = true;
};

}  // namespace dpl::nn
