#pragma once
// Pooling layers; none has parameters.

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of a MaxPool2d layer, as libtorch's MaxPool2dOptions: `MaxPool2dOptions(3).stride(2).padding(1)`.
/// The stride starts as the kernel's extent (PyTorch's default). dpl::max_pool2d checks the values.
struct MaxPool2dOptions {
  explicit MaxPool2dOptions(Size2d kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  /// Extent of the window.
  DPL_ARG(Size2d, kernel_size);
  /// Step between windows (0: the kernel's extent).
  DPL_ARG(Size2d, stride);
  /// Padding on each side, never winning the max (default 0).
  DPL_ARG(Size2d, padding) = 0;
};

/// dpl::max_pool2d with a fixed window; no parameters.
class MaxPool2d : public Module {
 public:
  /// The values are checked by each forward (dpl::max_pool2d).
  explicit MaxPool2d(const MaxPool2dOptions& options) : options_(options) {}
  /// MaxPool2d(MaxPool2dOptions(kernel).stride(stride).padding(padding)); stride 0: the kernel's extent.
  explicit MaxPool2d(Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0));
  /// Requires what dpl::max_pool2d requires of x.
  Variable forward(const Variable& x) override;
  /// The settings the layer was built with.
  const MaxPool2dOptions& options() const { return options_; }

 private:
  MaxPool2dOptions options_;
};

/// Settings of an AvgPool2d layer, as libtorch's AvgPool2dOptions:
/// `AvgPool2dOptions(3).stride(2).padding(1).count_include_pad(false)`. The stride starts as the
/// kernel's extent (PyTorch's default). dpl::avg_pool2d checks the values.
struct AvgPool2dOptions {
  explicit AvgPool2dOptions(Size2d kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  /// Extent of the window.
  DPL_ARG(Size2d, kernel_size);
  /// Step between windows (0: the kernel's extent).
  DPL_ARG(Size2d, stride);
  /// Zero padding on each side (default 0).
  DPL_ARG(Size2d, padding) = 0;
  /// Whether padded zeros count in the divisor (default true, PyTorch's).
  DPL_ARG(bool, count_include_pad) = true;
};

/// dpl::avg_pool2d with a fixed window; no parameters.
class AvgPool2d : public Module {
 public:
  /// The values are checked by each forward (dpl::avg_pool2d).
  explicit AvgPool2d(const AvgPool2dOptions& options) : options_(options) {}
  /// AvgPool2d(AvgPool2dOptions(kernel).stride(stride).padding(padding)
  /// .count_include_pad(count_include_pad)); stride 0: the kernel's extent.
  explicit AvgPool2d(Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0),
                     bool count_include_pad = true);
  /// Requires what dpl::avg_pool2d requires of x.
  Variable forward(const Variable& x) override;
  /// The settings the layer was built with.
  const AvgPool2dOptions& options() const { return options_; }

 private:
  AvgPool2dOptions options_;
};

/// dpl::global_avg_pool2d: (N, C, H, W) -> (N, C).
class GlobalAvgPool2d : public Module {
 public:
  /// Requires a 4-D float x.
  Variable forward(const Variable& x) override;
};

/// Settings of an AdaptiveAvgPool2d layer, as libtorch's AdaptiveAvgPool2dOptions:
/// `AdaptiveAvgPool2dOptions({7, 7})`. dpl::adaptive_avg_pool2d checks the values.
struct AdaptiveAvgPool2dOptions {
  /// The options for an output of output_size (both extents from one number: 7 means 7x7).
  explicit AdaptiveAvgPool2dOptions(Size2d output_size) : output_size_(output_size) {}
  /// Extent (Ho, Wo) of the output.
  DPL_ARG(Size2d, output_size);
};

/// dpl::adaptive_avg_pool2d to a fixed output size (PyTorch's nn.AdaptiveAvgPool2d: the mean over
/// each output pixel's adaptive window); no parameters.
class AdaptiveAvgPool2d : public Module {
 public:
  /// The values are checked by each forward (dpl::adaptive_avg_pool2d).
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& options) : options_(options) {}
  /// Requires what dpl::adaptive_avg_pool2d requires of x; returns (N, C, Ho, Wo), contiguous.
  Variable forward(const Variable& x) override;
  /// The settings the layer was built with.
  const AdaptiveAvgPool2dOptions& options() const { return options_; }

 private:
  AdaptiveAvgPool2dOptions options_;
};

}  // namespace dpl::nn
