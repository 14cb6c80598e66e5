#pragma once
// Layers: Linear, ReLU, Sequential, and the MNIST multi-layer perceptron.

#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

#include "dpl/core/random.hpp"
#include "dpl/nn/any_module.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of a Linear layer, as libtorch's LinearOptions: `LinearOptions(784, 10).bias(false)`.
struct LinearOptions {
  /// Requires positive feature counts (checked when the layer is built).
  LinearOptions(std::int64_t in_features, std::int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  /// Size of each input row.
  DPL_ARG(std::int64_t, in_features);
  /// Size of each output row.
  DPL_ARG(std::int64_t, out_features);
  /// Whether the layer adds a learned bias (default true).
  DPL_ARG(bool, bias) = true;
};

/// y = x W^T + b, parameters "weight" (out, in) and "bias" (out,), as PyTorch's Linear.
/// Initialisation (Chainer's defaults): W ~ Normal(0, sqrt(1/in)) (LeCun normal), b = 0.
class Linear : public Module {
 public:
  /// Requires positive feature counts; throws dpl::Error otherwise. Draws W from gen.
  explicit Linear(const LinearOptions& options, Generator& gen = default_generator());
  /// Linear(LinearOptions(in_features, out_features).bias(bias), gen).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Generator& gen = default_generator());
  /// Requires x of shape (..., in_features); returns (..., out_features).
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return weight_; }
  /// Undefined when the layer was built without a bias.
  const Variable& bias() const { return bias_; }
  std::int64_t in_features() const { return options_.in_features(); }
  std::int64_t out_features() const { return options_.out_features(); }
  /// The settings the layer was built with.
  const LinearOptions& options() const { return options_; }

 private:
  LinearOptions options_;
  Variable weight_, bias_;
};

/// max(x, 0), elementwise; no parameters.
class ReLU : public Module {
 public:
  Variable forward(const Variable& x) override;
};

/// Flattens (N, ...) to (N, prod(...)); no parameters.
class Flatten : public Module {
 public:
  Variable forward(const Variable& x) override;
};

/// PyTorch's nn.Identity: forward returns its input unchanged. A model variant that leaves a
/// layer out (a downsampling path it does not need) registers one in that layer's place, so the
/// other layers keep their names.
class Identity : public Module {
 public:
  Variable forward(const Variable& x) override { return x; }
};

namespace sequential_detail {
template <typename M>
struct IsModulePtr : std::false_type {};
template <typename M>
struct IsModulePtr<std::shared_ptr<M>> : std::is_base_of<Module, M> {};
}  // namespace sequential_detail

/// True for what Sequential's variadic constructor accepts: a shared_ptr to a Module, a Module
/// object (moved), or an AnyModule.
template <typename M>
inline constexpr bool is_module_arg = sequential_detail::IsModulePtr<std::decay_t<M>>::value ||
                                      std::is_base_of_v<Module, std::decay_t<M>> ||
                                      std::is_same_v<std::decay_t<M>, AnyModule>;

/// Applies its sub-modules in order, each to the previous one's output; they are named "0", "1",
/// ... Each is held as an AnyModule, so a chain step is a direct call of the module's own
/// forward. Every module of the chain takes one Variable and returns one; a module whose forward
/// takes other arguments may be appended, but running the chain then throws dpl::Error naming it
/// and its forward's parameters.
class Sequential : public Module {
 public:
  Sequential() = default;
  /// The modules in the order they run (each called through Module::forward(const Variable&)).
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Takes each module as a std::shared_ptr to a Module, as a Module object by value (moved into
  /// a new shared_ptr), or as an AnyModule, in the order they run, as libtorch's Sequential does.
  template <typename... Ms, typename = std::enable_if_t<(sizeof...(Ms) > 0) && (is_module_arg<Ms> && ...)>>
  explicit Sequential(Ms&&... modules) {
    (append(std::forward<Ms>(modules)), ...);
  }
  /// Appends a module (named by its position). Requires a non-null module.
  Sequential& append(AnyModule module);
  /// Appends a module held by shared_ptr (through its own forward).
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<Module, M>>>
  Sequential& append(std::shared_ptr<M> module) {
    return append(AnyModule(std::move(module)));
  }
  /// Appends a module object, moved into a new shared_ptr.
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<Module, std::decay_t<M>>>>
  Sequential& append(M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>, "Sequential: pass a module object as a temporary or std::move it");
    return append(AnyModule(std::forward<M>(module)));
  }
  /// Runs the chain: x through every module in order. Requires what each module requires.
  Variable forward(const Variable& x) override;
  /// forward(x) with the chain cut into `segments` runs of consecutive modules (the first
  /// size() % segments runs one module longer) and every run but the last under dpl::checkpoint,
  /// as PyTorch's checkpoint_sequential: until backward only each run's input is kept, and each
  /// run is computed again when backward reaches it. Requires 1 <= segments <= size() (dpl::Error
  /// otherwise); segments == 1 is forward(x).
  Variable forward_checkpointed(std::int64_t segments, const Variable& x);
  /// The number of modules.
  std::size_t size() const { return modules_.size(); }
  /// The i-th module; requires i < size().
  const AnyModule& operator[](std::size_t i) const;

 private:
  std::vector<AnyModule> modules_;
};

/// ChainerMN's MNIST model: Linear(in, units) - ReLU - Linear(units, units) - ReLU -
/// Linear(units, out). Defaults 784-1000-1000-10. Accepts (N, 784) or (N, 1, 28, 28).
class MLP : public Module {
 public:
  explicit MLP(std::int64_t units = 1000, std::int64_t in_features = 784, std::int64_t out_features = 10,
               Generator& gen = default_generator());
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

}  // namespace dpl::nn
