#pragma once
// Convolution layers.

#include <cstdint>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/random.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::nn {

/// 2-D convolution, y = conv2d(x, W) + b (see dpl::conv2d), with W of shape
/// (out_channels, in_channels/groups, kernel_size[0], kernel_size[1]) and b of shape (out_channels,).
/// Initialisation is PyTorch's default for its Conv2d: Kaiming-uniform with a = sqrt(5), which
/// makes W ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), where
/// fan_in = in_channels/groups * kernel_size[0] * kernel_size[1].
class Conv2d : public Module {
 public:
  /// Requires positive channel counts divisible by groups, positive kernel extents, strides and
  /// dilations, and non-negative padding; throws dpl::Error naming the bad argument otherwise.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Conv2dPair kernel_size, Conv2dPair stride = {1, 1},
         Conv2dPair padding = {0, 0}, Conv2dPair dilation = {1, 1}, std::int64_t groups = 1, bool bias = true,
         Generator& gen = default_generator());
  /// Requires x of shape (N, in_channels, H, W) large enough for the kernel; returns
  /// (N, out_channels, OH, OW), channels-last when x is.
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return weight_; }
  /// Undefined when the layer was built without a bias.
  const Variable& bias() const { return bias_; }

 private:
  Conv2dPair stride_, padding_, dilation_;
  std::int64_t groups_;
  Variable weight_, bias_;
};

/// Stores every 4-D parameter and buffer of module (convolution weights) channels-last, so that
/// channels-last inputs meet weights of their own format. Call it after Module::to(), which
/// moves tensors as contiguous copies. A module's arena (Module::arena(), used by the optimizers)
/// packs parameters contiguously, so after packing conv2d converts those weights per call again:
/// correct, at the cost of one weight copy per layer and step.
void to_channels_last(Module& module);

}  // namespace dpl::nn
