#pragma once
// Pooling layers; none has parameters.

#include "dpl/autograd/ops.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

/// dpl::max_pool2d with a fixed window (stride 0: the kernel's extent).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0));
  /// Requires what dpl::max_pool2d requires of x.
  Variable forward(const Variable& x) override;

 private:
  Size2d kernel_, stride_, padding_;
};

/// dpl::avg_pool2d with a fixed window (stride 0: the kernel's extent).
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2d kernel, Size2d stride = Size2d(0), Size2d padding = Size2d(0),
                     bool count_include_pad = true);
  /// Requires what dpl::avg_pool2d requires of x.
  Variable forward(const Variable& x) override;

 private:
  Size2d kernel_, stride_, padding_;
  bool count_include_pad_;
};

/// dpl::global_avg_pool2d: (N, C, H, W) -> (N, C).
class GlobalAvgPool2d : public Module {
 public:
  /// Requires a 4-D float x.
  Variable forward(const Variable& x) override;
};

}  // namespace dpl::nn
