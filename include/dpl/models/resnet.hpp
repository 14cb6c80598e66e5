#pragma once
// ResNet-18/34/50/101/152 (He et al. 2016) in torchvision's v1.5 form, with torchvision's
// parameter and buffer names, so that weights can be compared with and ported from its models.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/nn/conv.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/normalization.hpp"
#include "dpl/nn/pooling.hpp"

namespace dpl::models {

/// Settings of a ResNet besides its depth.
struct ResNetOptions {
  /// Outputs of the final fully connected layer (ImageNet's 1000 by default); must be >= 1.
  std::int64_t num_classes = 1000;
  /// Channels of the input images (3 for RGB); must be >= 1.
  std::int64_t in_channels = 3;
  /// Starts each residual block's last BatchNorm with weight (gamma) 0, so that every block begins
  /// as the identity (torchvision's zero_init_residual; Goyal et al. 2017). Off by default.
  bool zero_init_residual = false;
  /// In training, each convolution computes the batch statistics of the BatchNorm after it in its
  /// own kernel where the device can (GPU, channels-last: 1x1 stride-1 convolutions on sm_90 in a
  /// build with CUTLASS, in bfloat16, float16, and float32 while TF32 is allowed; on other GPUs,
  /// float16 ones on cuDNN's convolution with generated statistics), and the BatchNorm skips its
  /// pass over the convolution's output (nn::Conv2d::forward_with_sums). Results equal the separate
  /// pass's up to the rounding of the variance (plain sums of squares against the separate pass's
  /// sums about a value of the data) and of the convolution's kernel. On by default: on an H100 it
  /// made the ResNet-50 step 1.02-1.03x faster in each dtype (docs/performance.md).
  bool fused_statistics = true;
  /// In training, each residual block runs under dpl::checkpoint (activation checkpointing): of
  /// a block, backward keeps only its input and computes the rest again when it gets there, one
  /// more forward pass of the blocks for less memory (docs/models.md, "Checkpointed blocks"). Off by
  /// default.
  bool checkpoint_blocks = false;
};

/// What the blocks of every ResNet share: convolutions conv1..convK, each followed by its
/// BatchNorm bn1..bnK, with a ReLU after each but the last; the last BatchNorm's output plus the
/// shortcut s(x) then goes through the final ReLU. s is the identity, or downsample =
/// conv1x1(stride) + BatchNorm (a Sequential "0", "1") where the block changes the channel count
/// or the resolution. Sub-modules, in this order: conv1, bn1, ..., convK, bnK, downsample.
class ResidualBlock : public nn::Module {
 public:
  /// Requires x (N, in_channels, H, W); returns (N, out_channels, ceil(H/stride), ceil(W/stride))
  /// in x's memory format.
  Variable forward(const Variable& x) override;
  /// The BatchNorm whose output meets the shortcut (bnK): what zero_init_residual zeroes.
  const nn::BatchNorm2d& last_bn() const { return *bns_.back(); }
  /// Whether training computes each BatchNorm's statistics in the convolution before it (see
  /// ResNetOptions::fused_statistics); on by default.
  void set_fused_statistics(bool on) { fused_statistics_ = on; }

 protected:
  ResidualBlock() = default;
  /// Appends the next convolution (k x k, "same" padding, no bias; Kaiming-normal weights drawn
  /// from gen, as ResNet describes) and its BatchNorm. Requires positive counts and stride.
  void add_conv_bn(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride, Generator& gen);
  /// Adds the downsample shortcut when stride != 1 or in != out; the identity serves otherwise.
  void add_shortcut(std::int64_t in, std::int64_t out, std::int64_t stride, Generator& gen);

 private:
  std::vector<std::shared_ptr<nn::Conv2d>> convs_;
  std::vector<std::shared_ptr<nn::BatchNorm2d>> bns_;
  std::shared_ptr<nn::Sequential> downsample_;
  // downsample_'s two layers, called one by one so that the BatchNorm gets the convolution's sums.
  std::shared_ptr<nn::Conv2d> downsample_conv_;
  std::shared_ptr<nn::BatchNorm2d> downsample_bn_;
  bool fused_statistics_ = true;
};

/// The block of ResNet-18 and -34: two 3x3 convolutions to `planes`, the first with the block's
/// stride (see ResidualBlock for the rest).
class BasicBlock : public ResidualBlock {
 public:
  /// Output channels are `planes` times this.
  static constexpr std::int64_t kExpansion = 1;
  /// Requires positive channel counts and stride.
  BasicBlock(std::int64_t in_channels, std::int64_t planes, std::int64_t stride, Generator& gen);
};

/// The bottleneck block of ResNet-50/101/152 in its v1.5 form: conv1 1x1 to `planes`, conv2 3x3
/// with the block's stride (v1 put it on conv1), conv3 1x1 to 4 * planes (see ResidualBlock).
class Bottleneck : public ResidualBlock {
 public:
  /// Output channels are `planes` times this.
  static constexpr std::int64_t kExpansion = 4;
  /// Requires positive channel counts and stride.
  Bottleneck(std::int64_t in_channels, std::int64_t planes, std::int64_t stride, Generator& gen);
};

/// A ResNet of depth 18, 34 (BasicBlock) or 50, 101, 152 (Bottleneck), laid out as torchvision's:
/// conv1 (7x7, stride 2, no bias) - bn1 - relu - maxpool (3x3, stride 2, padding 1) - layer1..layer4
/// (Sequentials of blocks with 64, 128, 256, 512 planes; the first block of layer2..4 has stride
/// 2) - avgpool (global) - fc (with bias). Parameter and buffer names are torchvision's state_dict
/// keys ("conv1.weight", "layer1.0.bn1.running_mean", "layer2.0.downsample.0.weight",
/// "fc.bias", ...) in the same order.
///
/// Initialisation, as torchvision's: every convolution Kaiming-normal in fan_out mode with ReLU's
/// gain (std = sqrt(2 / (out_channels * kh * kw))); BatchNorm weight 1 and bias 0; fc weight and
/// bias uniform in +-1/sqrt(in_features). All draws come from the given generator, one parameter
/// after another in registration order, so every rank that passes a generator seeded alike builds
/// the same model.
class ResNet : public nn::Module {
 public:
  /// Requires depth in {18, 34, 50, 101, 152} and options with num_classes >= 1 and in_channels
  /// >= 1; throws dpl::Error saying what was expected and what came otherwise.
  ResNet(int depth, const ResNetOptions& options = {}, Generator& gen = default_generator());
  /// Requires x (N, in_channels, H, W), NCHW or channels-last, with H, W >= 1; the stem and the
  /// stages divide H and W by 32 (rounding up), and in training mode BatchNorm needs at least two
  /// values per channel there: N * ceil(H/32) * ceil(W/32) >= 2. Returns the logits (N, num_classes).
  Variable forward(const Variable& x) override;
  int depth() const { return depth_; }
  /// "resnet" followed by the depth.
  std::string arch() const { return "resnet" + std::to_string(depth_); }
  std::int64_t num_classes() const { return num_classes_; }
  /// Every residual block's last BatchNorm (bn2 of a BasicBlock, bn3 of a Bottleneck), in order.
  std::vector<const nn::BatchNorm2d*> residual_bns() const { return residual_bns_; }

 private:
  int depth_;
  std::int64_t num_classes_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::shared_ptr<nn::Sequential> layer1_, layer2_, layer3_, layer4_;
  std::shared_ptr<nn::GlobalAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
  std::vector<const nn::BatchNorm2d*> residual_bns_;
  bool fused_statistics_;
  bool checkpoint_blocks_;
};

/// The architecture names resnet() accepts: "resnet18", "resnet34", "resnet50", "resnet101",
/// "resnet152".
std::vector<std::string> resnet_archs();

/// Builds the ResNet named by arch (one of resnet_archs()); throws dpl::Error naming the accepted
/// names and the one given otherwise. See ResNet for the rest.
std::shared_ptr<ResNet> resnet(const std::string& arch, const ResNetOptions& options = {},
                               Generator& gen = default_generator());

}  // namespace dpl::models
