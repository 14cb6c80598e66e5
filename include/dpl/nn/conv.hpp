#pragma once
// Convolution layers.

#include <cstdint>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/random.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/options.hpp"

namespace dpl::nn {

/// Settings of a Conv2d layer, as libtorch's Conv2dOptions:
/// `Conv2dOptions(1, 16, 3).stride(1).padding(1).bias(false)`. An extent given as one number
/// serves both dimensions; `{h, w}` gives them apart. The layer checks the values when built.
struct Conv2dOptions {
  Conv2dOptions(std::int64_t in_channels, std::int64_t out_channels, Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  /// Channels of the input.
  DPL_ARG(std::int64_t, in_channels);
  /// Channels of the output (the number of filters).
  DPL_ARG(std::int64_t, out_channels);
  /// Extent of the filters.
  DPL_ARG(Size2d, kernel_size);
  /// Step between windows (default 1).
  DPL_ARG(Size2d, stride) = 1;
  /// Zeros added on each side of the input (default 0).
  DPL_ARG(Size2d, padding) = 0;
  /// Spacing between the filter's taps (default 1).
  DPL_ARG(Size2d, dilation) = 1;
  /// Groups of channels convolved apart; must divide both channel counts (default 1).
  DPL_ARG(std::int64_t, groups) = 1;
  /// Whether the layer adds a learned bias per output channel (default true).
  DPL_ARG(bool, bias) = true;
};

/// 2-D convolution, y = conv2d(x, W) + b (see dpl::conv2d), with W of shape
/// (out_channels, in_channels/groups, kernel_size[0], kernel_size[1]) and b of shape (out_channels,).
/// Initialisation is PyTorch's default for its Conv2d: Kaiming-uniform with a = sqrt(5), which
/// makes W ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), where
/// fan_in = in_channels/groups * kernel_size[0] * kernel_size[1].
class Conv2d : public Module {
 public:
  /// Requires positive channel counts divisible by groups, positive kernel extents, strides and
  /// dilations, and non-negative padding; throws dpl::Error naming the bad argument otherwise.
  /// Draws the initial weights and bias from gen.
  explicit Conv2d(const Conv2dOptions& options, Generator& gen = default_generator());
  /// The same layer from positional arguments (the options' names, in their order).
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Conv2dPair kernel_size, Conv2dPair stride = {1, 1},
         Conv2dPair padding = {0, 0}, Conv2dPair dilation = {1, 1}, std::int64_t groups = 1, bool bias = true,
         Generator& gen = default_generator());
  /// Requires x of shape (N, in_channels, H, W) large enough for the kernel; returns
  /// (N, out_channels, OH, OW), channels-last when x is.
  Variable forward(const Variable& x) override;
  /// forward(x), with the output's per-channel sums (for the BatchNorm that follows) computed in
  /// the same kernel where dpl::conv2d_with_sums can: a layer without a bias on the GPU,
  /// channels-last. Elsewhere `sums` is left undefined.
  Variable forward_with_sums(const Variable& x, ChannelSums& sums);
  const Variable& weight() const { return weight_; }
  /// Undefined when the layer was built without a bias.
  const Variable& bias() const { return bias_; }
  /// The settings the layer was built with.
  const Conv2dOptions& options() const { return options_; }

 private:
  Conv2dOptions options_;
  Conv2dPair stride_, padding_, dilation_;
  Variable weight_, bias_;
};

/// Settings of a ConvTranspose2d layer, as libtorch's ConvTranspose2dOptions:
/// `ConvTranspose2dOptions(16, 8, 4).stride(2).padding(1)`. An extent given as one number serves
/// both dimensions; `{h, w}` gives them apart. The layer checks the values when built.
struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(std::int64_t in_channels, std::int64_t out_channels, Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  /// Channels of the input.
  DPL_ARG(std::int64_t, in_channels);
  /// Channels of the output.
  DPL_ARG(std::int64_t, out_channels);
  /// Extent of the filters.
  DPL_ARG(Size2d, kernel_size);
  /// Step between the input pixels' windows in the output (default 1).
  DPL_ARG(Size2d, stride) = 1;
  /// dilation * (kernel_size - 1) - padding zeros are added to each side of the input (default 0):
  /// the output loses `padding` rows and columns on each side.
  DPL_ARG(Size2d, padding) = 0;
  /// Rows and columns added to one side of the output, below the stride (default 0).
  DPL_ARG(Size2d, output_padding) = 0;
  /// Groups of channels convolved apart; must divide both channel counts (default 1).
  DPL_ARG(std::int64_t, groups) = 1;
  /// Whether the layer adds a learned bias per output channel (default true).
  DPL_ARG(bool, bias) = true;
  /// Spacing between the filter's taps (default 1).
  DPL_ARG(Size2d, dilation) = 1;
};

/// 2-D transposed convolution, y = conv_transpose2d(x, W) + b (see dpl::conv_transpose2d), with W
/// of shape (in_channels, out_channels/groups, kernel_size[0], kernel_size[1]) and b of shape
/// (out_channels,), PyTorch's names and shapes. Initialisation is PyTorch's for its
/// ConvTranspose2d: Kaiming-uniform with a = sqrt(5) on W, whose fan_in PyTorch takes from W's
/// second dimension, so W and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
/// fan_in = out_channels/groups * kernel_size[0] * kernel_size[1].
class ConvTranspose2d : public Module {
 public:
  /// Requires positive channel counts divisible by groups, positive kernel extents, strides and
  /// dilations, non-negative padding and 0 <= output_padding < stride; throws dpl::Error naming
  /// the bad argument otherwise. Draws the initial weights and bias from gen.
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options, Generator& gen = default_generator());
  /// Requires x of shape (N, in_channels, H, W); returns (N, out_channels, OH, OW) with
  /// OH = (H - 1)*stride - 2*padding + dilation*(kernel_size-1) + output_padding + 1, likewise
  /// OW; channels-last when x is.
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return weight_; }
  /// Undefined when the layer was built without a bias.
  const Variable& bias() const { return bias_; }
  /// The settings the layer was built with.
  const ConvTranspose2dOptions& options() const { return options_; }

 private:
  ConvTranspose2dOptions options_;
  Variable weight_, bias_;
};

/// Stores every 4-D parameter and buffer of module (convolution weights) channels-last, so that
/// channels-last inputs meet weights of their own format. Call it after Module::to(), which
/// moves tensors as contiguous copies. A module's arena (Module::arena(), used by the optimizers)
/// packs parameters contiguously, so after packing conv2d converts those weights per call again:
/// correct, at the cost of one weight copy per layer and step.
void to_channels_last(Module& module);

}  // namespace dpl::nn
