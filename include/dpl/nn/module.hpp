#pragma once
// Module: a layer or model with named parameters and sub-modules.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/nn/arena.hpp"

namespace dpl::nn {

/// Base class of layers and models. A module owns parameters (leaf Variables that require
/// gradients), buffers (named tensors that are state but not trained, such as BatchNorm's running
/// statistics) and sub-modules, each under a name. Hierarchical names join with '.', as in
/// "layers.0.weight".
///
/// Order: named_parameters() and named_buffers() follow registration order, depth first: a
/// module's own entries and its sub-modules' entries in the order they were registered. Layers
/// register in the order of their forward pass, so backward finishes the gradients in the
/// reverse of this order (what overlapping the gradient allreduce with backward relies on), and
/// every rank that builds the same model gets the same order.
///
/// Forward, as in libtorch: a concrete module declares one `forward` of whatever signature it
/// needs, e.g. `Variable forward(const Variable& tokens, const Variable& targets)` or
/// `Variable forward(const Variable& x, const Variable& mask)`, and is called through it on its
/// own type (`attention->forward(q, mask)`). A module of one input overrides the virtual
/// `forward(const Variable&)` below, which is what code that knows a model only as a Module uses
/// (`model(x)`, Sequential, the Trainer's evaluator, summary()). A module whose forward takes
/// other inputs does not override it; calling it then throws dpl::Error naming the module. To hold
/// modules of any forward in one place (a container, a list of heads), wrap each in an
/// nn::AnyModule (dpl/nn/any_module.hpp): `any.forward(tokens, targets)` checks the arguments
/// against the module's forward at run time and says what was expected and what was given.
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Moves a module that nothing refers to yet into a new object (Sequential takes modules by
  /// value this way). Ensures: the new module has the parameters, buffers and sub-modules.
  Module(Module&&) = default;

  /// The computation of a module of one input. Requires an input this module accepts (see each
  /// module). Not overridden (a module whose forward takes other inputs): throws dpl::Error
  /// naming the module's type.
  virtual Variable forward(const Variable& x);
  /// forward(x).
  Variable operator()(const Variable& x) { return forward(x); }

  /// Every parameter of this module and its sub-modules, in registration order (see above). A
  /// parameter reachable under several names (a shared sub-module) is listed once, under the
  /// first name.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  /// The values of named_parameters(), in the same order.
  std::vector<Variable> parameters() const;
  /// Every buffer of this module and its sub-modules, in registration order, each listed once.
  /// The variables never require gradients; their data() is the buffer's current tensor.
  std::vector<std::pair<std::string, Variable>> named_buffers() const;
  /// Direct sub-modules in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  /// This module (named "") and every sub-module under its dotted name ("encoder", "encoder.0",
  /// ...), depth first in registration order, as PyTorch's named_modules(): a sub-module
  /// registered under several names is listed once, under the first. The pointers are this
  /// module's own and live as long as it does.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// The parameters registered on this module itself (not its sub-modules), by their own names,
  /// in registration order: what a per-layer rule (an initialiser, a parameter group) looks at
  /// while visiting named_modules() or apply().
  std::vector<std::pair<std::string, Variable>> own_parameters() const { return params_; }
  /// Calls fn on every sub-module and then on this module, as PyTorch's Module.apply (children
  /// first, depth first, each module once): the place for initialisation, e.g.
  ///     model.apply([](nn::Module& m) {
  ///       if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) nn::init::kaiming_normal_(conv->weight());
  ///     });
  /// Returns this module.
  Module& apply(const std::function<void(Module&)>& fn);

  /// Training mode on (default) or off; applies to sub-modules too.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// The flat parameter and gradient arenas of this module. Packs them on first use and again
  /// whenever the parameter set has changed since (a parameter or module registered anywhere, or
  /// a parameter's data or gradient replaced with set_data/set_grad/clear_grad); a repack gives the
  /// arena a new id(), which is how optimizers learn to reset their state. When nothing changed,
  /// the call costs two counter loads. `repacked` (optional) tells whether this call packed.
  ParameterArena& arena(bool* repacked = nullptr);
  /// Sets every gradient to zero (one fill over the gradient arena).
  void zero_grad();
  /// Moves every parameter and buffer to device, repacking the arenas there.
  void to(Device device);
  /// The device of the parameters (cpu for a module without parameters).
  Device device() const;
  /// Total number of parameter elements (no padding).
  std::int64_t num_parameters() const;

 protected:
  /// Registers a parameter initialised with value; returns the Variable (requires_grad on).
  /// Names must be unique within this module and contain no '.'.
  Variable register_parameter(const std::string& name, Tensor value);
  /// Registers a buffer initialised with value and returns its Variable (requires_grad off). The
  /// module keeps the Variable, so to() and loading replace the tensor inside it: keep the
  /// Variable, not its data(). Same naming rules as register_parameter.
  Variable register_buffer(const std::string& name, Tensor value);
  /// Registers a sub-module and returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  enum class Kind { kParameter, kBuffer, kModule };
  // One registration: which kind, and its index in params_, buffers_ or children_.
  struct Slot {
    Kind kind;
    std::size_t index;
  };

  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(Kind kind, const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;
  std::vector<std::pair<std::string, Variable>> listed_once(Kind kind) const;

  std::vector<Slot> order_;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, Variable>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<ParameterArena> arena_;
  // The registration and rebind counters when arena_ was last checked against the parameters.
  std::uint64_t arena_registrations_ = 0;
  std::uint64_t arena_rebinds_ = 0;
  bool training_ = true;
};

}  // namespace dpl::nn
