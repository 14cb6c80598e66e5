#include "dpl/models/resnet.hpp"

#include <array>
#include <cmath>
#include <sstream>

#include "dpl/autograd/ops/checkpoint.hpp"
#include "dpl/core/error.hpp"

namespace dpl::models {

namespace {

// Blocks per stage of each depth, and which block builds them (He et al. 2016, table 1).
struct Spec {
  int depth;
  bool bottleneck;
  std::array<int, 4> blocks;
};
constexpr std::array<Spec, 5> kSpecs = {{{18, false, {2, 2, 2, 2}},
                                         {34, false, {3, 4, 6, 3}},
                                         {50, true, {3, 4, 6, 3}},
                                         {101, true, {3, 4, 23, 3}},
                                         {152, true, {3, 8, 36, 3}}}};

const Spec& spec_for(int depth) {
  for (const Spec& s : kSpecs)
    if (s.depth == depth) return s;
  DPL_FAIL("ResNet: expected depth 18, 34, 50, 101 or 152, got ", depth);
}

// A bias-free k x k convolution with "same" padding, initialised as torchvision initialises a
// ResNet's: Kaiming-normal, fan_out mode, ReLU's gain. Conv2d draws PyTorch's default init when it
// is built; that draw goes to a throwaway generator so that `gen` yields exactly one draw per
// weight, in registration order, whatever Conv2d's own default is.
std::shared_ptr<nn::Conv2d> conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride,
                                 Generator& gen) {
  Generator scratch(0);
  auto c = std::make_shared<nn::Conv2d>(in, out, Conv2dPair{k, k}, Conv2dPair{stride, stride},
                                        Conv2dPair{k / 2, k / 2}, Conv2dPair{1, 1}, 1, false, scratch);
  Tensor w = c->weight().data();
  const std::int64_t fan_out = out * k * k;
  w.copy_(Tensor::normal(w.shape(), 0.f, std::sqrt(2.f / static_cast<float>(fan_out)), gen));
  return c;
}

// The convolution's output, with its per-channel sums for the BatchNorm after it where `fused`
// asks for them and the device computes them in the convolution (sums undefined otherwise).
Variable conv_output(nn::Conv2d& conv, const Variable& x, bool fused, ChannelSums& sums) {
  if (fused) return conv.forward_with_sums(x, sums);
  sums = ChannelSums{};
  return conv.forward(x);
}

// One stage: `blocks` blocks of `planes`, the first with `stride`. Advances in_channels to the
// stage's output channels and records each block's last BatchNorm.
template <typename Block>
std::shared_ptr<nn::Sequential> make_stage(std::int64_t& in_channels, std::int64_t planes, int blocks,
                                           std::int64_t stride, Generator& gen,
                                           std::vector<const nn::BatchNorm2d*>& residual_bns, bool fused_statistics) {
  auto stage = std::make_shared<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    auto block = std::make_shared<Block>(in_channels, planes, i == 0 ? stride : 1, gen);
    block->set_fused_statistics(fused_statistics);
    residual_bns.push_back(&block->last_bn());
    stage->append(block);
    in_channels = planes * Block::kExpansion;
  }
  return stage;
}

std::string joined_archs() {
  std::ostringstream os;
  const auto names = resnet_archs();
  for (std::size_t i = 0; i < names.size(); ++i) os << (i == 0 ? "" : ", ") << names[i];
  return os.str();
}

}  // namespace

void ResidualBlock::add_conv_bn(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride,
                                Generator& gen) {
  const std::string n = std::to_string(convs_.size() + 1);
  convs_.push_back(register_module("conv" + n, conv(in, out, k, stride, gen)));
  bns_.push_back(register_module("bn" + n, std::make_shared<nn::BatchNorm2d>(out)));
}

void ResidualBlock::add_shortcut(std::int64_t in, std::int64_t out, std::int64_t stride, Generator& gen) {
  if (stride == 1 && in == out) return;
  downsample_conv_ = conv(in, out, 1, stride, gen);
  downsample_bn_ = std::make_shared<nn::BatchNorm2d>(out);
  downsample_ = register_module("downsample", std::make_shared<nn::Sequential>(downsample_conv_, downsample_bn_));
}

Variable ResidualBlock::forward(const Variable& x) {
  const bool fused = fused_statistics_ && is_training();
  ChannelSums sums;
  Variable h = x;
  const std::size_t last = convs_.size() - 1;
  for (std::size_t i = 0; i < last; ++i) h = bns_[i]->forward_relu(conv_output(*convs_[i], h, fused, sums), &sums);
  Variable shortcut = x;
  if (downsample_) {
    ChannelSums shortcut_sums;
    const Variable z = conv_output(*downsample_conv_, x, fused, shortcut_sums);
    shortcut = downsample_bn_->forward_from_sums(z, &shortcut_sums);
  }
  // The last BatchNorm, the residual add and the ReLU are one op, which the GPU path runs as one
  // fused pass.
  const Variable z = conv_output(*convs_[last], h, fused, sums);
  return bns_[last]->forward_add_relu(z, shortcut, &sums);
}

BasicBlock::BasicBlock(std::int64_t in_channels, std::int64_t planes, std::int64_t stride, Generator& gen) {
  add_conv_bn(in_channels, planes, 3, stride, gen);
  add_conv_bn(planes, planes, 3, 1, gen);
  add_shortcut(in_channels, planes * kExpansion, stride, gen);
}

Bottleneck::Bottleneck(std::int64_t in_channels, std::int64_t planes, std::int64_t stride, Generator& gen) {
  add_conv_bn(in_channels, planes, 1, 1, gen);
  // v1.5: the stride sits on the 3x3 convolution, not on the first 1x1 (which would skip 3/4 of
  // the input's pixels).
  add_conv_bn(planes, planes, 3, stride, gen);
  add_conv_bn(planes, planes * kExpansion, 1, 1, gen);
  add_shortcut(in_channels, planes * kExpansion, stride, gen);
}

ResNet::ResNet(int depth, const ResNetOptions& options, Generator& gen)
    : depth_(depth),
      num_classes_(options.num_classes),
      fused_statistics_(options.fused_statistics),
      checkpoint_blocks_(options.checkpoint_blocks) {
  const Spec& spec = spec_for(depth);
  DPL_CHECK(options.num_classes >= 1, "ResNet: expected num_classes >= 1, got ", options.num_classes);
  DPL_CHECK(options.in_channels >= 1, "ResNet: expected in_channels >= 1, got ", options.in_channels);

  conv1_ = register_module("conv1", conv(options.in_channels, 64, 7, 2, gen));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64));
  maxpool_ = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  std::int64_t channels = 64;
  std::array<std::shared_ptr<nn::Sequential>*, 4> stages = {&layer1_, &layer2_, &layer3_, &layer4_};
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::int64_t planes = std::int64_t{64} << i;
    const std::int64_t stride = i == 0 ? 1 : 2;
    const int blocks = spec.blocks[i];
    auto stage = spec.bottleneck
                     ? make_stage<Bottleneck>(channels, planes, blocks, stride, gen, residual_bns_, fused_statistics_)
                     : make_stage<BasicBlock>(channels, planes, blocks, stride, gen, residual_bns_, fused_statistics_);
    *stages[i] = register_module("layer" + std::to_string(i + 1), stage);
  }
  avgpool_ = register_module("avgpool", std::make_shared<nn::GlobalAvgPool2d>());

  // nn.Linear's default init, as torchvision keeps it for fc: weight and bias uniform in
  // +-1/sqrt(in_features) (Linear's own default is Chainer's, so the values are redrawn here).
  Generator scratch(0);
  fc_ = register_module("fc", std::make_shared<nn::Linear>(channels, options.num_classes, true, scratch));
  const float bound = 1.f / std::sqrt(static_cast<float>(channels));
  for (const Variable* v : {&fc_->weight(), &fc_->bias()}) {
    Tensor t = v->data();
    t.copy_(Tensor::uniform(t.shape(), -bound, bound, gen));
  }

  if (options.zero_init_residual)
    for (const nn::BatchNorm2d* bn : residual_bns_) {
      Tensor gamma = bn->weight().data();
      gamma.fill_(0.0);
    }
}

Variable ResNet::forward(const Variable& x) {
  ChannelSums sums;
  const Variable z = conv_output(*conv1_, x, fused_statistics_ && is_training(), sums);
  Variable h = bn1_->forward_relu_max_pool(z, maxpool_->options(), &sums);
  const bool checkpointed = checkpoint_blocks_ && is_training() && grad_enabled();
  for (const auto* stage : {&layer1_, &layer2_, &layer3_, &layer4_}) {
    if (!checkpointed) {
      h = (*stage)->forward(h);
      continue;
    }
    for (const auto& [name, block] : (*stage)->children())
      h = checkpoint([block = block](const Variable& in) { return block->forward(in); }, h);
  }
  return fc_->forward(avgpool_->forward(h));
}

std::vector<std::string> resnet_archs() {
  std::vector<std::string> names;
  for (const Spec& s : kSpecs) names.push_back("resnet" + std::to_string(s.depth));
  return names;
}

std::shared_ptr<ResNet> resnet(const std::string& arch, const ResNetOptions& options, Generator& gen) {
  for (const Spec& s : kSpecs)
    if (arch == "resnet" + std::to_string(s.depth)) return std::make_shared<ResNet>(s.depth, options, gen);
  DPL_FAIL("resnet: expected one of ", joined_archs(), ", got '", arch, "'");
}

}  // namespace dpl::models
