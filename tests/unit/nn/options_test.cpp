// Options structs: every layer built from its Options has the settings, the parameter names,
// shapes and initial values of the same layer built positionally, and the same output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Names and values of every parameter and buffer, in order.
std::vector<std::pair<std::string, std::vector<float>>> state_of(const nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, v] : m.named_parameters()) out.emplace_back(name, v.data().to_vector<float>());
  for (const auto& [name, v] : m.named_buffers())
    if (v.data().dtype() == kFloat32) out.emplace_back(name, v.data().to_vector<float>());
  return out;
}

std::vector<std::string> names_of_params(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, v] : m.named_parameters()) out.push_back(name);
  return out;
}

std::vector<Shape> shapes_of(const nn::Module& m) {
  std::vector<Shape> out;
  for (const auto& [name, v] : m.named_parameters()) out.push_back(v.data().shape());
  return out;
}

TEST(Options, SettersChainAndGettersReadBack) {
  const auto conv = nn::Conv2dOptions(1, 16, 3).stride(2).padding({1, 0}).dilation(1).groups(1).bias(false);
  EXPECT_EQ(conv.in_channels(), 1);
  EXPECT_EQ(conv.out_channels(), 16);
  EXPECT_EQ(conv.kernel_size().h, 3);
  EXPECT_EQ(conv.kernel_size().w, 3);
  EXPECT_EQ(conv.stride().h, 2);
  EXPECT_EQ(conv.padding().h, 1);
  EXPECT_EQ(conv.padding().w, 0);
  EXPECT_FALSE(conv.bias());
  EXPECT_TRUE(nn::Conv2dOptions(1, 2, 3).bias());  // PyTorch's defaults
  EXPECT_EQ(nn::Conv2dOptions(1, 2, 3).stride().w, 1);
  EXPECT_EQ(nn::Conv2dOptions(1, 2, 3).padding().w, 0);
  const auto bn = nn::BatchNorm2dOptions(8);
  EXPECT_EQ(bn.eps(), 1e-5);
  EXPECT_EQ(bn.momentum(), 0.1);
  EXPECT_TRUE(bn.affine());
  EXPECT_EQ(nn::MaxPool2dOptions(3).stride().h, 3);  // the stride starts as the kernel
  EXPECT_EQ(nn::AvgPool2dOptions({2, 4}).stride().w, 4);
  EXPECT_TRUE(nn::AvgPool2dOptions(2).count_include_pad());
  EXPECT_FLOAT_EQ(nn::DropoutOptions().p(), 0.5f);
  EXPECT_TRUE(nn::LinearOptions(3, 4).bias());
}

TEST(Options, ResamplingLayersTakePyTorchsDefaults) {
  const auto up = nn::ConvTranspose2dOptions(8, 4, {4, 3}).stride(2).padding(1).output_padding({1, 0}).groups(2);
  EXPECT_EQ(up.in_channels(), 8);
  EXPECT_EQ(up.out_channels(), 4);
  EXPECT_EQ(up.kernel_size().w, 3);
  EXPECT_EQ(up.stride().h, 2);
  EXPECT_EQ(up.output_padding().h, 1);
  EXPECT_EQ(up.output_padding().w, 0);
  EXPECT_EQ(up.groups(), 2);
  const auto plain = nn::ConvTranspose2dOptions(1, 2, 3);  // PyTorch's defaults
  EXPECT_EQ(plain.stride().h, 1);
  EXPECT_EQ(plain.padding().w, 0);
  EXPECT_EQ(plain.output_padding().w, 0);
  EXPECT_EQ(plain.dilation().h, 1);
  EXPECT_TRUE(plain.bias());
  const nn::UpsampleOptions resize;
  EXPECT_FALSE(resize.size().has_value());
  EXPECT_FALSE(resize.scale_factor().has_value());
  EXPECT_EQ(resize.mode(), InterpolateMode::kNearest);
  EXPECT_FALSE(resize.align_corners());
  const auto sized = nn::UpsampleOptions().size(Size2d(4, 6)).mode(InterpolateMode::kBilinear);
  EXPECT_EQ(sized.size()->w, 6);
  EXPECT_EQ(nn::UpsampleOptions().scale_factor(Scale2d(2.0, 3.0)).scale_factor()->w, 3.0);
}

TEST(Options, LinearMatchesThePositionalConstructor) {
  Generator g1(5), g2(5);
  nn::Linear a(nn::LinearOptions(6, 4).bias(false), g1);
  nn::Linear b(6, 4, false, g2);
  EXPECT_EQ(state_of(a), state_of(b));
  EXPECT_THAT(shapes_of(a), ElementsAre(Shape{4, 6}));
  EXPECT_FALSE(a.bias().defined());
  EXPECT_EQ(a.options().in_features(), 6);
  nn::Linear with_bias(nn::LinearOptions(6, 4), g1);
  EXPECT_THAT(shapes_of(with_bias), ElementsAre(Shape{4, 6}, Shape{4}));
  DPL_EXPECT_ERROR(nn::Linear(nn::LinearOptions(0, 4)), AllOf(HasSubstr("Linear"), HasSubstr("in=0")));
}

TEST(Options, Conv2dMatchesThePositionalConstructorAndPyTorchsShapes) {
  Generator g1(6), g2(6);
  nn::Conv2d a(nn::Conv2dOptions(4, 8, {3, 1}).stride(2).padding({1, 0}).groups(2), g1);
  nn::Conv2d b(4, 8, Conv2dPair{3, 1}, Conv2dPair{2, 2}, Conv2dPair{1, 0}, Conv2dPair{1, 1}, 2, true, g2);
  EXPECT_EQ(state_of(a), state_of(b));
  EXPECT_THAT(shapes_of(a), ElementsAre(Shape{8, 2, 3, 1}, Shape{8}));
  // PyTorch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = 2 * 3 * 1.
  const float bound = 1.f / std::sqrt(6.f);
  for (float w : a.weight().data().to_vector<float>()) EXPECT_LE(std::abs(w), bound);
  const Variable x(Tensor::normal({2, 4, 5, 5}, 0.f, 1.f, g1));
  EXPECT_EQ(a(x).data().to_vector<float>(), b(x).data().to_vector<float>());
  EXPECT_EQ(a(x).data().shape(), (Shape{2, 8, 3, 3}));
  nn::Conv2d no_bias(nn::Conv2dOptions(1, 16, 3).stride(1).padding(1).bias(false));
  EXPECT_EQ(names_of_params(no_bias), std::vector<std::string>{"weight"});
  DPL_EXPECT_ERROR(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)),
                   AllOf(HasSubstr("Conv2d"), HasSubstr("groups=2")));
  DPL_EXPECT_ERROR(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(-1)), HasSubstr("non-negative padding"));
}

TEST(Options, BatchNorm2dMatchesThePositionalConstructor) {
  nn::BatchNorm2d a(nn::BatchNorm2dOptions(3).eps(1e-3).momentum(0.5));
  nn::BatchNorm2d b(3, 1e-3, 0.5);
  Generator gen(7);
  const Variable x(Tensor::normal({4, 3, 2, 2}, 1.f, 2.f, gen));
  EXPECT_EQ(a(x).data().to_vector<float>(), b(x).data().to_vector<float>());
  EXPECT_EQ(state_of(a), state_of(b));  // the running statistics moved by momentum 0.5 in both
  EXPECT_EQ(a.options().momentum(), 0.5);
  nn::BatchNorm2d plain(nn::BatchNorm2dOptions(3).affine(false));
  EXPECT_TRUE(plain.named_parameters().empty());
  std::vector<std::string> buffers;
  for (const auto& [name, v] : plain.named_buffers()) buffers.push_back(name);
  EXPECT_THAT(buffers, ElementsAre("running_mean", "running_var", "num_batches_tracked"));
  DPL_EXPECT_ERROR(nn::BatchNorm2d(nn::BatchNorm2dOptions(3).momentum(2.0)), HasSubstr("momentum in [0, 1]"));
}

TEST(Options, PoolingMatchesThePositionalConstructor) {
  Generator gen(8);
  const Variable x(Tensor::normal({2, 3, 9, 9}, 0.f, 1.f, gen));
  nn::MaxPool2d max_a(nn::MaxPool2dOptions(3).stride(2).padding(1));
  nn::MaxPool2d max_b(3, 2, 1);
  EXPECT_EQ(max_a(x).data().to_vector<float>(), max_b(x).data().to_vector<float>());
  EXPECT_EQ(max_a(x).data().shape(), (Shape{2, 3, 5, 5}));
  // The default stride is the kernel's, as MaxPool2d(3) (stride 0) has.
  EXPECT_EQ(nn::MaxPool2d(nn::MaxPool2dOptions(3))(x).data().to_vector<float>(),
            nn::MaxPool2d(3)(x).data().to_vector<float>());
  nn::AvgPool2d avg_a(nn::AvgPool2dOptions(3).stride(2).padding(1).count_include_pad(false));
  nn::AvgPool2d avg_b(3, 2, 1, false);
  EXPECT_EQ(avg_a(x).data().to_vector<float>(), avg_b(x).data().to_vector<float>());
  EXPECT_NE(avg_a(x).data().to_vector<float>(), nn::AvgPool2d(3, 2, 1, true)(x).data().to_vector<float>());
  EXPECT_FALSE(avg_a.options().count_include_pad());
}

TEST(Options, DropoutMatchesThePositionalConstructor) {
  Generator g1(9), g2(9);
  nn::Dropout a(nn::DropoutOptions(0.25f), g1);
  nn::Dropout b(0.25f, g2);
  const Variable x(Tensor::ones({64}));
  EXPECT_EQ(a(x).data().to_vector<float>(), b(x).data().to_vector<float>());
  EXPECT_FLOAT_EQ(a.p(), 0.25f);
  DPL_EXPECT_ERROR(nn::Dropout(nn::DropoutOptions().p(1.f)), HasSubstr("[0, 1)"));
}

}  // namespace
}  // namespace dpl
