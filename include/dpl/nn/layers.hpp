#pragma once
// Layers: Linear, ReLU, Sequential, and the MNIST multi-layer perceptron.

#include <initializer_list>
#include <memory>

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

/// Applies its sub-modules in order; they are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
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
