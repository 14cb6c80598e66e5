// ResNets: torchvision's parameter counts, names and initialisation, the v1.5 bottleneck, forward in
// both memory formats, gradients, zero_init_residual, errors and the summary. Inputs stay small
// (32x32) so that the suite stays quick on a CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/graph_nodes.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

models::ResNetOptions classes(std::int64_t n) {
  models::ResNetOptions o;
  o.num_classes = n;
  return o;
}

std::map<std::string, Variable> by_name(const std::vector<std::pair<std::string, Variable>>& named) {
  return {named.begin(), named.end()};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// True for the names of BatchNorm weights (gammas): a module's "bnK" or a downsample's "1".
bool is_bn_weight(const std::string& name) {
  const bool bn = name.find(".bn") != std::string::npos || name.rfind("bn", 0) == 0 ||
                  name.find("downsample.1.") != std::string::npos;
  return bn && ends_with(name, ".weight");
}

// Tensors of parameters() and of state_dict() (parameters and buffers) in torchvision's models.
void expect_tensor_counts(const models::ResNet& model, std::size_t params, std::size_t state) {
  EXPECT_EQ(model.named_parameters().size(), params) << model.arch();
  EXPECT_EQ(model.named_parameters().size() + model.named_buffers().size(), state) << model.arch();
}

// With zero_init_residual, each block's last gamma (layerS.B.<last>.weight) is 0 and every other
// one (the stem's, the inner ones, the shortcut's) keeps 1.
void expect_zero_init_residual(const models::ResNet& model, const std::string& last, std::size_t blocks) {
  std::size_t zeroed = 0;
  for (const auto& [name, v] : model.named_parameters()) {
    if (!is_bn_weight(name)) continue;
    const auto values = v.data().to_vector<float>();
    const bool is_last = name.rfind("layer", 0) == 0 && ends_with(name, "." + last + ".weight");
    const float want = is_last ? 0.f : 1.f;
    zeroed += is_last;
    EXPECT_TRUE(std::all_of(values.begin(), values.end(), [&](float x) { return x == want; })) << name;
  }
  EXPECT_EQ(zeroed, blocks) << model.arch();
  EXPECT_EQ(model.residual_bns().size(), blocks) << model.arch();
}

models::ResNetOptions zero_init() {
  models::ResNetOptions o;
  o.zero_init_residual = true;
  return o;
}

// The expected counts are torchvision's (sum of p.numel() over parameters(), 1000 classes), as are
// the names and shapes (its state_dict keys). Building a ResNet draws one normal value per weight,
// which takes seconds for the deep ones on a small CPU: each test builds its model once and checks
// all it can on it.
TEST(ResNet, Resnet18CountsNamesAndZeroInitResidual) {
  const auto model = models::resnet("resnet18", zero_init());
  EXPECT_EQ(model->num_parameters(), 11689512);
  EXPECT_EQ(model->arch(), "resnet18");
  expect_tensor_counts(*model, 62, 122);
  // Basic blocks: two 3x3 convolutions, and no shortcut convolution in layer1.
  const auto p = by_name(model->named_parameters());
  EXPECT_EQ(p.at("layer1.0.conv2.weight").shape(), (Shape{64, 64, 3, 3}));
  EXPECT_EQ(p.count("layer1.0.conv3.weight"), 0u);
  EXPECT_EQ(p.count("layer1.0.downsample.0.weight"), 0u);
  EXPECT_EQ(p.at("layer2.0.downsample.0.weight").shape(), (Shape{128, 64, 1, 1}));
  EXPECT_EQ(p.at("fc.weight").shape(), (Shape{1000, 512}));
  expect_zero_init_residual(*model, "bn2", 8);
}

TEST(ResNet, Resnet50CountsNamesArenaAndZeroInitResidual) {
  const auto model = models::resnet("resnet50", zero_init());
  EXPECT_EQ(model->num_parameters(), 25557032);
  expect_tensor_counts(*model, 161, 320);
  // The float32 gradients of ResNet-50 fill 102,228,128 bytes; the arena aligns each parameter to
  // 16 floats, which only fc.bias (1000 floats) needs, 8 floats more.
  EXPECT_EQ(model->num_parameters() * 4, 102228128);
  EXPECT_EQ(model->arena().nbytes(), 102228160u);

  const auto params = model->named_parameters();
  std::vector<std::string> first;
  for (std::size_t i = 0; i < 9; ++i) first.push_back(params[i].first);
  EXPECT_THAT(first, ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
                                 "layer1.0.bn1.bias", "layer1.0.conv2.weight", "layer1.0.bn2.weight",
                                 "layer1.0.bn2.bias"));
  EXPECT_EQ(params[params.size() - 2].first, "fc.weight");
  EXPECT_EQ(params.back().first, "fc.bias");
  const auto p = by_name(params);
  const std::vector<std::pair<std::string, Shape>> shapes = {
      {"conv1.weight", {64, 3, 7, 7}},
      {"layer1.0.conv3.weight", {256, 64, 1, 1}},
      {"layer1.0.downsample.0.weight", {256, 64, 1, 1}},
      {"layer1.0.downsample.1.weight", {256}},
      {"layer2.0.conv2.weight", {128, 128, 3, 3}},
      {"layer2.0.downsample.0.weight", {512, 256, 1, 1}},
      {"layer4.2.bn3.bias", {2048}},
      {"fc.weight", {1000, 2048}},
      {"fc.bias", {1000}}};
  for (const auto& [name, shape] : shapes) {
    ASSERT_EQ(p.count(name), 1u) << name;
    EXPECT_EQ(p.at(name).shape(), shape) << name;
  }
  // Only the first block of each stage changes the shape, so only it has a shortcut convolution.
  EXPECT_EQ(p.count("layer1.1.downsample.0.weight"), 0u);
  EXPECT_EQ(p.count("layer3.5.conv3.weight"), 1u);
  EXPECT_EQ(p.count("layer3.6.conv1.weight"), 0u);
  const auto buffers = by_name(model->named_buffers());
  for (const char* name : {"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                           "layer4.0.downsample.1.running_var"})
    EXPECT_EQ(buffers.count(name), 1u) << name;

  expect_zero_init_residual(*model, "bn3", 16);
}

TEST(ResNet, DeeperModelsHaveTorchvisionsParameterCounts) {
  for (const auto& [arch, count] : std::vector<std::pair<std::string, std::int64_t>>{
           {"resnet34", 21797672}, {"resnet101", 44549160}, {"resnet152", 60192808}}) {
    const auto model = models::resnet(arch);
    EXPECT_EQ(model->num_parameters(), count) << arch;
    EXPECT_EQ(model->arch(), arch);
  }
}

// Kaiming-normal (fan_out, ReLU gain) convolutions, BatchNorm 1 and 0, fc uniform in
// +-1/sqrt(fan_in); the same seed gives the same model.
TEST(ResNet, InitialisationIsTorchvisionsAndFollowsTheSeed) {
  Generator gen(7);
  models::ResNet model(18, classes(10), gen);
  const auto p = by_name(model.named_parameters());
  // 2.36 M draws of std sqrt(2 / 4608) = 0.0208: the sample's mean and standard deviation land
  // within a few 1e-5 of the true ones, far inside these bounds.
  const auto w = p.at("layer4.1.conv2.weight").data().to_vector<float>();
  double sum = 0, sq = 0;
  for (float v : w) sum += v, sq += static_cast<double>(v) * v;
  const double mean = sum / static_cast<double>(w.size());
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size()) - mean * mean), std::sqrt(2.0 / (512 * 9)), 2e-4);
  // The stem tells fan_out (64*49, std 0.0253) from fan_in (3*49, std 0.1166).
  const auto stem = p.at("conv1.weight").data().to_vector<float>();
  double stem_sq = 0;
  for (float v : stem) stem_sq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(stem_sq / static_cast<double>(stem.size())), std::sqrt(2.0 / (64 * 49)), 1e-3);

  for (const auto& [name, v] : model.named_parameters()) {
    // The convolutions have no bias, so every bias but fc's is a BatchNorm's.
    const bool bn_weight = is_bn_weight(name), bn_bias = ends_with(name, ".bias") && name != "fc.bias";
    if (!bn_weight && !bn_bias) continue;
    const auto values = v.data().to_vector<float>();
    const float want = bn_weight ? 1.f : 0.f;
    EXPECT_TRUE(std::all_of(values.begin(), values.end(), [&](float x) { return x == want; })) << name;
  }
  const float bound = 1.f / std::sqrt(512.f);
  for (const char* name : {"fc.weight", "fc.bias"}) {
    const auto values = p.at(name).data().to_vector<float>();
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    EXPECT_GE(*lo, -bound) << name;
    EXPECT_LT(*hi, bound) << name;
    EXPECT_GT(*hi - *lo, bound) << name;  // drawn, not constant
  }

  Generator same(7);
  const auto a = models::ResNet(18, classes(10), same).named_parameters();
  const auto mine = model.named_parameters();
  for (std::size_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(a[i].second.data().to_vector<float>(), mine[i].second.data().to_vector<float>()) << mine[i].first;
  // Another seed, other weights (on one block, which draws the same way and builds in a moment).
  Generator g1(1), g2(2);
  EXPECT_NE(models::BasicBlock(8, 8, 1, g1).parameters()[0].data().to_vector<float>(),
            models::BasicBlock(8, 8, 1, g2).parameters()[0].data().to_vector<float>());
}

// v1.5 puts the bottleneck's stride on its 3x3 convolution. Were it on the first 1x1 (v1), the
// output of a stride-2 block would read only the even pixels of its input (the shortcut's 1x1
// stride-2 convolution too), so changing an odd pixel would change nothing.
TEST(ResNet, BottleneckStridesOnItsThreeByThreeConvolution) {
  Generator gen(3);
  models::Bottleneck block(8, 4, 2, gen);
  block.eval();
  Tensor x = Tensor::normal({1, 8, 8, 8}, 0.f, 1.f, gen);
  const auto before = block(Variable(x)).data().to_vector<float>();
  EXPECT_EQ(block(Variable(x)).shape(), (Shape{1, 16, 4, 4}));
  for (std::int64_t c = 0; c < 8; ++c) x.set<float>({0, c, 3, 3}, 5.f);
  const auto after = block(Variable(x)).data().to_vector<float>();
  EXPECT_NE(before, after);
}

// The NCHW and channels-last paths compute the same logits, each in its own format.
TEST(ResNet, ForwardShapeAndChannelsLastAgree) {
  Generator gen(11);
  models::ResNet model(18, classes(5), gen);
  // 32x32 leaves 1x1 pixels for layer4; four images give its BatchNorms four values a channel.
  const Tensor x = Tensor::uniform({4, 3, 32, 32}, -1.f, 1.f, gen);
  const Tensor nchw = model(Variable(x)).data();
  EXPECT_EQ(nchw.shape(), (Shape{4, 5}));

  nn::to_channels_last(model);
  const Tensor x_cl = x.to_channels_last();
  ASSERT_TRUE(x_cl.is_channels_last());
  const Tensor nhwc = model(Variable(x_cl)).data();
  EXPECT_EQ(nhwc.shape(), (Shape{4, 5}));
  const auto a = nchw.to_vector<float>(), b = nhwc.to_vector<float>();
  float scale = 0.f;
  for (float v : a) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.f);
  // 18 layers of float32 sums in different orders: agreement to 1e-4 of the logits' scale.
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f * scale) << "logit " << i;

  // One channel in: the stem takes the channel count from the options.
  models::ResNetOptions gray = classes(3);
  gray.in_channels = 1;
  models::ResNet mono(18, gray, gen);
  EXPECT_EQ(mono(Variable(Tensor::uniform({2, 1, 32, 32}, -1.f, 1.f, gen))).shape(), (Shape{2, 3}));
}

TEST(ResNet, BackwardGivesEveryParameterAFiniteNonZeroGradient) {
  Generator gen(5);
  models::ResNet model(18, classes(4), gen);
  // Four images: layer4's BatchNorms see four values a channel (with two, their outputs would be
  // +-1 whatever the input, and the gradients below them nearly zero).
  const Variable x(Tensor::uniform({4, 3, 32, 32}, -1.f, 1.f, gen));
  const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{1, 3, 0, 2}, {4});
  model.zero_grad();
  const Variable loss = softmax_cross_entropy(model(x), labels);
  ASSERT_TRUE(std::isfinite(loss.data().item()));
  loss.backward();
  for (const auto& [name, v] : model.named_parameters()) {
    ASSERT_TRUE(v.grad().defined()) << name;
    const auto g = v.grad().to_vector<float>();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float e) { return std::isfinite(e); })) << name;
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float e) { return e != 0.f; })) << name;
  }
  // The bottleneck's path, downsample included, on one block.
  models::Bottleneck block(16, 8, 2, gen);
  sum(block(Variable(Tensor::uniform({2, 16, 8, 8}, -1.f, 1.f, gen)))).backward();
  for (const auto& [name, v] : block.named_parameters()) {
    ASSERT_TRUE(v.grad().defined()) << name;
    const auto g = v.grad().to_vector<float>();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float e) { return std::isfinite(e); })) << name;
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float e) { return e != 0.f; })) << name;
  }
}

TEST(ResNet, BadArchitecturesAndOptionsSayWhatWasExpected) {
  DPL_EXPECT_ERROR(models::resnet("resnet20"),
                   HasSubstr("expected one of resnet18, resnet34, resnet50, resnet101, resnet152, got 'resnet20'"));
  DPL_EXPECT_ERROR(models::resnet("ResNet50"), HasSubstr("got 'ResNet50'"));
  DPL_EXPECT_ERROR(models::ResNet(20), HasSubstr("expected depth 18, 34, 50, 101 or 152, got 20"));
  DPL_EXPECT_ERROR(models::resnet("resnet18", classes(0)), HasSubstr("expected num_classes >= 1, got 0"));
  models::ResNetOptions none;
  none.in_channels = 0;
  DPL_EXPECT_ERROR(models::resnet("resnet18", none), HasSubstr("expected in_channels >= 1, got 0"));
  EXPECT_THAT(models::resnet_archs(), ElementsAre("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"));
}

TEST(ResNet, SummaryListsTheStagesAndTheTotal) {
  const auto model = models::resnet("resnet18", classes(10));
  const std::string text = nn::summary(*model, {1, 3, 32, 32});
  EXPECT_THAT(text, AllOf(HasSubstr("conv1"), HasSubstr("bn1"), HasSubstr("maxpool"), HasSubstr("layer4"),
                          HasSubstr("avgpool"), HasSubstr("fc"), HasSubstr("ResNet"), HasSubstr("(1, 10)"),
                          HasSubstr("Total params: " + std::to_string(model->num_parameters()))));
  EXPECT_TRUE(model->is_training());
}

// On the CPU no convolution computes its output's sums, so the fused-statistics option changes
// nothing: one training step gives the same loss, gradients and running
// statistics to the bit with it off, channels-last and NCHW alike.
// One training step's values: the loss, every parameter's gradient, then every buffer (running
// statistics and batch counts), in order.
// `checkpoints`: how many checkpoint nodes the forward pass must have recorded.
std::vector<float> step_values(models::ResNet& model, const Tensor& images, const Tensor& labels,
                               std::int64_t checkpoints = 0) {
  model.zero_grad();
  const Variable loss = softmax_cross_entropy(model(Variable(images)), labels);
  EXPECT_EQ(test::nodes_named(loss, "checkpoint"), checkpoints);
  loss.backward();
  std::vector<float> out{loss.data().item()};
  for (const auto& [name, v] : model.named_parameters())
    for (float e : v.grad().contiguous().to_vector<float>()) out.push_back(e);
  for (const auto& [name, b] : model.named_buffers()) {
    if (b.data().dtype() == kInt64)
      for (std::int64_t e : b.data().to_vector<std::int64_t>()) out.push_back(static_cast<float>(e));
    else
      for (float e : b.data().to_vector<float>()) out.push_back(e);
  }
  return out;
}

TEST(ResNet, FusedStatisticsOptionChangesNothingWhereNoConvolutionComputesSums) {
  for (bool nhwc : {false, true}) {
    std::vector<float> results[2];
    for (int fused = 0; fused < 2; ++fused) {
      Generator gen(11);
      models::ResNetOptions options = classes(3);
      options.fused_statistics = fused == 1;
      models::ResNet model(18, options, gen);
      if (nhwc) nn::to_channels_last(model);
      Tensor images = Tensor::uniform({4, 3, 32, 32}, -1.f, 1.f, gen);
      if (nhwc) images = images.to_channels_last();
      results[fused] = step_values(model, images, Tensor::from_vector(std::vector<std::int32_t>{1, 2, 0, 2}, {4}));
    }
    EXPECT_EQ(results[1], results[0]) << (nhwc ? "channels-last" : "NCHW");
  }
}

// Checkpointed blocks recompute each block in backward: the same loss, gradients, running
// statistics and batch counts, bit for bit, in both memory formats and for both block kinds.
TEST(ResNet, CheckpointedBlocksGiveTheStepWithoutThem) {
  for (int depth : {18, 50}) {
    for (bool nhwc : {false, true}) {
      std::vector<float> results[2];
      for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
        Generator gen(5);
        models::ResNetOptions options = classes(3);
        options.checkpoint_blocks = checkpointed == 1;
        models::ResNet model(depth, options, gen);
        if (nhwc) nn::to_channels_last(model);
        Tensor images = Tensor::uniform({2, 3, 32, 32}, -1.f, 1.f, gen);
        if (nhwc) images = images.to_channels_last();
        const std::int64_t blocks = depth == 18 ? 8 : 16;
        results[checkpointed] = step_values(model, images, Tensor::from_vector(std::vector<std::int32_t>{1, 2}, {2}),
                                            checkpointed == 1 ? blocks : 0);
      }
      EXPECT_EQ(results[1], results[0]) << "resnet" << depth << (nhwc ? " channels-last" : " NCHW");
    }
  }
}

// conv2d_with_sums where nothing fuses the sums (the CPU): conv2d's output, sums left undefined
// (whatever they held before).
TEST(ResNet, ConvolutionWithSumsOnTheCpuIsTheConvolution) {
  Generator gen(3);
  const Tensor x = Tensor::uniform({2, 8, 6, 6}, -1.f, 1.f, gen).to_channels_last();
  const Tensor w = Tensor::uniform({4, 8, 3, 3}, -1.f, 1.f, gen).to_channels_last();
  ChannelSums sums{Tensor::zeros({4}), Tensor::zeros({4})};
  const Tensor got = conv2d_with_sums(Variable(x), Variable(w), sums, {1, 1}, {1, 1}).data();
  const Tensor want = conv2d(Variable(x), Variable(w), Variable(), {1, 1}, {1, 1}).data();
  EXPECT_FALSE(sums.defined());
  EXPECT_FALSE(sums.sum_of_squares.defined());
  EXPECT_EQ(got.contiguous().to_vector<float>(), want.contiguous().to_vector<float>());
}

}  // namespace
}  // namespace dpl
