#pragma once
// Layers: Linear, ReLU, Sequential, and the MNIST multi-layer perceptron.

#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

#include "dpl/core/random.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

/// y = x W^T + b. W has shape (out, in), b shape (out,).
/// Initialisation (Chainer's defaults): W ~ Normal(0, sqrt(1/in)) (LeCun normal), b = 0.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Generator& gen = default_generator());
  /// Requires x of shape (N, in_features); returns (N, out_features).
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

 private:
  std::int64_t in_, out_;
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

namespace sequential_detail {
template <typename M>
struct IsModulePtr : std::false_type {};
template <typename M>
struct IsModulePtr<std::shared_ptr<M>> : std::is_base_of<Module, M> {};
}  // namespace sequential_detail

/// True for what Sequential's variadic constructor accepts: a shared_ptr to a Module or a Module.
template <typename M>
inline constexpr bool is_module_arg = sequential_detail::IsModulePtr<std::decay_t<M>>::value ||
                                      std::is_base_of_v<Module, std::decay_t<M>>;

/// m itself when it is a shared_ptr, else m (an rvalue) moved into a new shared_ptr.
template <typename M>
std::shared_ptr<Module> as_module_ptr(M&& m) {
  if constexpr (sequential_detail::IsModulePtr<std::decay_t<M>>::value) {
    return std::forward<M>(m);
  } else {
    static_assert(std::is_move_constructible_v<std::decay_t<M>>, "Sequential: pass this module as a shared_ptr");
    static_assert(!std::is_lvalue_reference_v<M>, "Sequential: pass a module object as a temporary or std::move it");
    return std::make_shared<std::decay_t<M>>(std::move(m));
  }
}

/// Applies its sub-modules in order; they are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Takes each module as a std::shared_ptr to a Module, or as a Module object by value (moved
  /// into a new shared_ptr), in the order they run, as libtorch's Sequential does.
  template <typename... Ms, typename = std::enable_if_t<(sizeof...(Ms) > 0) && (is_module_arg<Ms> && ...)>>
  explicit Sequential(Ms&&... modules) {
    (append(as_module_ptr(std::forward<Ms>(modules))), ...);
  }
  /// Appends a module (named by its position).
  Sequential& append(std::shared_ptr<Module> module);
  Variable forward(const Variable& x) override;
  std::size_t size() const { return children().size(); }
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
