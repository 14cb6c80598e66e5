// nn::init: the bounds and spreads PyTorch's initialisers give, written in place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/sample_stats.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

using test::mean_of;
double std_of(const std::vector<float>& v) { return std::sqrt(test::variance_of(v)); }

TEST(Init, FansAreComputedAsPyTorchDoes) {
  const nn::init::Fans linear = nn::init::fans(Tensor::empty({30, 20}));
  EXPECT_EQ(linear.in, 20);
  EXPECT_EQ(linear.out, 30);
  const nn::init::Fans conv = nn::init::fans(Tensor::empty({64, 3, 7, 7}));
  EXPECT_EQ(conv.in, 3 * 49);
  EXPECT_EQ(conv.out, 64 * 49);
  DPL_EXPECT_ERROR(nn::init::fans(Tensor::empty({5})), HasSubstr("need a tensor of rank >= 2"));
}

TEST(Init, GainsAreTorchsCalculateGain) {
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  DPL_EXPECT_ERROR(nn::init::calculate_gain("swish"), HasSubstr("got 'swish'"));
}

TEST(Init, UniformFamiliesStayWithinTheirBoundAndReachNearIt) {
  Generator gen(3);
  Tensor w = Tensor::zeros({256, 128});
  const double kaiming_bound = std::sqrt(2.0) * std::sqrt(3.0 / 128.0);
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::kFanIn, "relu", gen);
  auto v = w.to_vector<float>();
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -kaiming_bound);
  EXPECT_LT(*hi, kaiming_bound);
  EXPECT_GT(*hi, 0.99 * kaiming_bound);

  const double xavier_bound = std::sqrt(6.0 / (128.0 + 256.0));
  nn::init::xavier_uniform_(w, 1.0, gen);
  v = w.to_vector<float>();
  EXPECT_LE(*std::max_element(v.begin(), v.end()), xavier_bound);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.99 * xavier_bound);
}

TEST(Init, NormalFamiliesHaveTheirStandardDeviation) {
  Generator gen(4);
  Tensor w = Tensor::zeros({512, 256});
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::kFanOut, "relu", gen);
  EXPECT_NEAR(std_of(w.to_vector<float>()), std::sqrt(2.0 / 512.0), 0.01 * std::sqrt(2.0 / 512.0));
  nn::init::xavier_normal_(w, 2.0, gen);
  EXPECT_NEAR(std_of(w.to_vector<float>()), 2.0 * std::sqrt(2.0 / 768.0), 0.02 * std::sqrt(2.0 / 768.0));
  nn::init::normal_(w, 1.5, 0.5, gen);
  EXPECT_NEAR(mean_of(w.to_vector<float>()), 1.5, 0.005);
}

TEST(Init, TruncatedNormalStaysInsideItsInterval) {
  Generator gen(5);
  Tensor w = Tensor::zeros({100000});
  nn::init::trunc_normal_(w, 0.0, 1.0, -0.5, 1.0, gen);
  const auto v = w.to_vector<float>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -0.5f);
  EXPECT_LE(*std::max_element(v.begin(), v.end()), 1.0f);
  // The mean of N(0, 1) truncated to [-0.5, 1]: (phi(-0.5) - phi(1)) / (Phi(1) - Phi(-0.5)).
  const auto pdf = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  const auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  EXPECT_NEAR(mean_of(v), (pdf(-0.5) - pdf(1.0)) / (cdf(1.0) - cdf(-0.5)), 0.01);
  DPL_EXPECT_ERROR(nn::init::trunc_normal_(w, 0.0, 1.0, 10.0, 11.0, gen), HasSubstr("expected at least 1e-6"));
  DPL_EXPECT_ERROR(nn::init::trunc_normal_(w, 0.0, 1.0, 1.0, -1.0, gen), HasSubstr("expected std > 0 and a < b"));
}

TEST(Init, WritesInPlaceSoAModulesArenaStaysBound) {
  Generator gen(6);
  nn::Linear layer(4, 3, true, gen);
  optim::SGD opt(0.1f);
  opt.setup(layer);
  const void* before = layer.weight().data().raw_data();
  nn::init::ones_(layer.weight());
  nn::init::constant_(layer.bias(), 0.25);
  EXPECT_EQ(layer.weight().data().raw_data(), before);
  for (float v : layer.weight().data().to_vector<float>()) EXPECT_EQ(v, 1.f);
  for (float v : layer.bias().data().to_vector<float>()) EXPECT_EQ(v, 0.25f);
  // 16-bit tensors get each value rounded once.
  Tensor half = Tensor::zeros({8, 8}, kBFloat16);
  nn::init::uniform_(half, -1.0, 1.0, gen);
  for (float v : half.to(kFloat32).to_vector<float>()) EXPECT_LE(std::fabs(v), 1.f);
  DPL_EXPECT_ERROR(nn::init::normal_(Tensor::zeros({2}, kInt32)), HasSubstr("expected a float tensor, got int32"));
}

}  // namespace
