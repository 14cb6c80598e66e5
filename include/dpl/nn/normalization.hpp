#pragma once
// Normalisation layers.

#include <cstdint>

#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of a BatchNorm2d layer, as libtorch's BatchNormOptions:
/// `BatchNorm2dOptions(64).eps(1e-3).momentum(0.01).affine(false)`. The layer checks the values.
struct BatchNorm2dOptions {
  explicit BatchNorm2dOptions(std::int64_t num_features) : num_features_(num_features) {}
  /// Channels C of the input; must be >= 1.
  DPL_ARG(std::int64_t, num_features);
  /// Added to the variance before its square root; must be > 0 (default 1e-5).
  DPL_ARG(double, eps) = 1e-5;
  /// Weight of the batch in the running statistics, in [0, 1] (default 0.1).
  DPL_ARG(double, momentum) = 0.1;
  /// Whether the layer has the learned weight and bias (default true).
  DPL_ARG(bool, affine) = true;
};

/// Batch normalisation of (N, C, H, W) images per channel (see dpl::batch_norm). Parameters:
/// weight (C,) = 1 and bias (C,) = 0 when affine. Buffers: running_mean (C,) = 0, running_var
/// (C,) = 1 and num_batches_tracked (int64, shape ()) = 0, all moved by to() and broadcast with
/// the parameters but never trained. In training mode (the module's flag) it normalises with the
/// batch statistics and updates the running ones with `momentum` (PyTorch's convention: new =
/// (1 - momentum) old + momentum batch, unbiased batch variance; 0.1 by default) and counts the
/// batch; in evaluation mode it normalises with the running statistics.
class BatchNorm2d : public Module {
 public:
  /// Requires num_features >= 1, eps > 0 and momentum in [0, 1]; throws dpl::Error otherwise.
  explicit BatchNorm2d(const BatchNorm2dOptions& options);
  /// BatchNorm2d(BatchNorm2dOptions(num_features).eps(eps).momentum(momentum).affine(affine)).
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  /// Requires x (N, num_features, H, W) of a float dtype; returns x's shape, dtype and format.
  Variable forward(const Variable& x) override;
  /// relu(forward(x)) through dpl::batch_norm_relu, one pass where the device's library fuses it.
  /// Same requirements and effects on the running statistics as forward().
  Variable forward_relu(const Variable& x);
  /// relu(forward(x) + residual) through dpl::batch_norm_add_relu (the end of a residual block),
  /// one pass where the device's library fuses it. Requires residual of x's shape and dtype;
  /// otherwise as forward().
  Variable forward_add_relu(const Variable& x, const Variable& residual);
  /// The affine parameters (undefined without affine).
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  /// The running statistics and the count of training batches (the buffers' current tensors).
  Tensor running_mean() const { return running_mean_.data(); }
  Tensor running_var() const { return running_var_.data(); }
  Tensor num_batches_tracked() const { return num_batches_tracked_.data(); }
  /// The channel count C that inputs must have.
  std::int64_t num_features() const { return options_.num_features(); }
  /// The settings the layer was built with.
  const BatchNorm2dOptions& options() const { return options_; }

 private:
  // Counts a training batch in num_batches_tracked (every forward variant does).
  void count_batch();

  BatchNorm2dOptions options_;
  Variable weight_, bias_;
  Variable running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace dpl::nn
