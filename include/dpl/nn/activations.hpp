#pragma once
// Activation, dropout and softmax layers: thin modules over the ops of the same names.

#include "dpl/autograd/ops/elementwise.hpp"
#include "dpl/core/random.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// x if x > 0 else slope * x, elementwise; no parameters.
class LeakyReLU : public Module {
 public:
  /// Any slope (PyTorch's default 0.01).
  explicit LeakyReLU(float slope = 0.01f) : slope_(slope) {}
  /// Any rank, float input; returns x's shape.
  Variable forward(const Variable& x) override;
  /// The negative slope given at construction.
  float slope() const { return slope_; }

 private:
  float slope_;
};

/// 1 / (1 + exp(-x)), elementwise; no parameters.
class Sigmoid : public Module {
 public:
  /// Any rank, float input; returns x's shape.
  Variable forward(const Variable& x) override;
};

/// tanh(x), elementwise; no parameters.
class Tanh : public Module {
 public:
  /// Any rank, float input; returns x's shape.
  Variable forward(const Variable& x) override;
};

/// x * Phi(x) elementwise (see dpl::gelu), as PyTorch's nn.GELU: the exact erf form by default,
/// PyTorch's tanh approximation with GeluApproximation::kTanh (nn.GELU(approximate='tanh'));
/// no parameters.
class GELU : public Module {
 public:
  /// Any approximation (the exact form by default).
  explicit GELU(GeluApproximation approximate = GeluApproximation::kNone) : approximate_(approximate) {}
  /// Any rank, float input; returns x's shape.
  Variable forward(const Variable& x) override;
  /// The approximation given at construction.
  GeluApproximation approximate() const { return approximate_; }

 private:
  GeluApproximation approximate_;
};

/// Settings of a Dropout layer, as libtorch's DropoutOptions: `DropoutOptions(0.1)` or
/// `DropoutOptions().p(0.1)`.
struct DropoutOptions {
  explicit DropoutOptions(float p = 0.5f) : p_(p) {}
  /// Probability of zeroing an element, in [0, 1) (checked when the layer is built).
  DPL_ARG(float, p);
};

/// Inverted dropout (see dpl::dropout) while the module is training; the identity in eval().
class Dropout : public Module {
 public:
  /// Requires p in [0, 1) (throws dpl::Error otherwise). The masks come from `gen`, which must
  /// outlive the module.
  explicit Dropout(const DropoutOptions& options, Generator& gen = default_generator());
  /// Dropout(DropoutOptions(p), gen).
  explicit Dropout(float p = 0.5f, Generator& gen = default_generator());
  /// Any rank, float input; returns x's shape.
  Variable forward(const Variable& x) override;
  /// The drop probability given at construction.
  float p() const { return options_.p(); }
  /// The settings the layer was built with.
  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
  Generator* gen_;
};

/// Channel dropout (see dpl::dropout2d: whole (sample, channel) planes of an (N, C, H, W) input
/// zeroed, the rest scaled by 1 / (1 - p)) while the module is training; the identity in eval().
/// Takes DropoutOptions, as libtorch's Dropout2d takes Dropout2dOptions of the same one setting.
class Dropout2d : public Module {
 public:
  /// Requires p in [0, 1) (throws dpl::Error otherwise). The masks come from `gen`, which must
  /// outlive the module.
  explicit Dropout2d(const DropoutOptions& options = DropoutOptions(), Generator& gen = default_generator());
  /// Requires a 4-D float x (N, C, H, W); returns x's shape.
  Variable forward(const Variable& x) override;
  /// The settings the layer was built with.
  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
  Generator* gen_;
};

/// softmax over the last dimension; no parameters.
class Softmax : public Module {
 public:
  /// Rank >= 1, float input; returns x's shape.
  Variable forward(const Variable& x) override;
};

/// log_softmax over the last dimension; no parameters.
class LogSoftmax : public Module {
 public:
  /// Rank >= 1, float input; returns x's shape.
  Variable forward(const Variable& x) override;
};

}  // namespace dpl::nn
