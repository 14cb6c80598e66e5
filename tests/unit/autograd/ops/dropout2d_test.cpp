// dropout2d and nn::Dropout2d: one mask value per (sample, channel) plane, 0 or 1 / (1 - p); the
// share of planes dropped; backward through the same mask; the identity in eval() and at p = 0;
// equal generator states giving equal masks; finite differences; channels-last and 16-bit
// inputs; and the errors for bad inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::gradcheck;
using Vars = std::vector<Variable>;

// For each (n, c) plane of x (N, C, H, W) and y = dropout2d(x): whether the plane was kept. Fails
// the test unless every element of a plane is x * 1 / (1 - p) (kept) or 0 (dropped).
std::vector<bool> kept_planes(const Tensor& x, const Tensor& y, float p) {
  const std::vector<float> xs = x.contiguous().to_vector<float>(), ys = y.contiguous().to_vector<float>();
  const std::int64_t planes = x.size(0) * x.size(1), area = x.size(2) * x.size(3);
  const float scale = 1.f / (1.f - p);
  std::vector<bool> kept(static_cast<std::size_t>(planes));
  for (std::int64_t q = 0; q < planes; ++q) {
    kept[q] = ys[q * area] != 0.f;
    for (std::int64_t k = q * area; k < (q + 1) * area; ++k) {
      if (kept[q]) EXPECT_EQ(ys[k], xs[k] * scale) << "plane " << q << " element " << k - q * area;
      else EXPECT_EQ(ys[k], 0.f) << "plane " << q << " element " << k - q * area;
    }
  }
  return kept;
}

TEST(Dropout2d, ZeroesWholePlanesAndScalesTheRest) {
  Generator data(1), drop(2);
  const Tensor x = test::away_from_zero({4, 8, 5, 3}, data);
  const float p = 0.4f;
  const std::vector<bool> kept = kept_planes(x, dropout2d(Variable(x), p, drop).data(), p);
  EXPECT_NE(std::count(kept.begin(), kept.end(), true), 0);
  EXPECT_NE(std::count(kept.begin(), kept.end(), false), 0);
}

TEST(Dropout2d, DropsTheExpectedShareOfPlanes) {
  Generator drop(3);
  const Tensor x = Tensor::ones({64, 64, 2, 2});
  for (float p : {0.1f, 0.5f, 0.8f}) {
    const std::vector<bool> kept = kept_planes(x, dropout2d(Variable(x), p, drop).data(), p);
    const double dropped = static_cast<double>(std::count(kept.begin(), kept.end(), false)) / kept.size();
    // 4096 planes: 5 standard deviations of the share are at most 0.04.
    EXPECT_NEAR(dropped, p, 5 * std::sqrt(p * (1 - p) / kept.size())) << "p = " << p;
  }
}

TEST(Dropout2d, BackwardUsesTheForwardMask) {
  Generator data(4), drop(5);
  const float p = 0.5f;
  const Variable x(test::away_from_zero({3, 10, 4, 4}, data), true);
  const Variable y = dropout2d(x, p, drop);
  sum(y).backward();
  // d sum(y) / dx is the mask itself: 1 / (1 - p) where the forward kept the plane, else 0.
  const std::vector<bool> kept = kept_planes(x.data(), y.data(), p);
  const std::vector<bool> kept_by_grad = kept_planes(Tensor::ones(x.shape()), x.grad(), p);
  EXPECT_EQ(kept_by_grad, kept);
}

TEST(Dropout2d, SameGeneratorStateGivesTheSameMask) {
  Generator data(6), g1(7), g2(7);
  const Variable x(test::away_from_zero({2, 16, 3, 3}, data));
  const std::vector<float> a = dropout2d(x, 0.3f, g1).data().to_vector<float>();
  EXPECT_EQ(dropout2d(x, 0.3f, g2).data().to_vector<float>(), a);
  EXPECT_NE(dropout2d(x, 0.3f, g1).data().to_vector<float>(), a);  // the generator moved on
}

TEST(Dropout2d, IdentityInEvalAndAtZero) {
  Generator data(8);
  const Variable x(test::away_from_zero({2, 3, 4, 4}, data), true);
  EXPECT_EQ(dropout2d(x, 0.5f, data, false).id(), x.id());
  EXPECT_EQ(dropout2d(x, 0.f, data).id(), x.id());
  nn::Dropout2d layer(nn::DropoutOptions(0.5f));
  layer.eval();
  EXPECT_EQ(layer.forward(x).id(), x.id());
  layer.train();
  EXPECT_NE(layer.forward(x).id(), x.id());
  EXPECT_TRUE(layer.named_parameters().empty());
  EXPECT_FLOAT_EQ(layer.options().p(), 0.5f);
}

TEST(Dropout2d, Gradcheck) {
  Generator data(9);
  // A fresh generator per call: gradcheck evaluates f many times and needs the same mask each time.
  EXPECT_TRUE(gradcheck(
      [](const Vars& v) {
        Generator g(10);
        return dropout2d(v[0], 0.3f, g);
      },
      {test::away_from_zero({3, 4, 3, 2}, data)}));
}

TEST(Dropout2d, ChannelsLastAndSixteenBitInputsKeepTheMask) {
  Generator data(11);
  const Tensor x = test::away_from_zero({2, 8, 3, 4}, data);
  Generator g0(12);
  const std::vector<bool> want = kept_planes(x, dropout2d(Variable(x), 0.5f, g0).data(), 0.5f);
  Generator g1(12);
  EXPECT_EQ(kept_planes(x, dropout2d(Variable(x.to_channels_last()), 0.5f, g1).data(), 0.5f), want);
  for (DType dt : {kBFloat16, kFloat16}) {
    Generator g(12);
    const Tensor x16 = x.to(dt);
    const Tensor y = dropout2d(Variable(x16), 0.5f, g).data();
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(kept_planes(x16.to(kFloat32), y.to(kFloat32), 0.5f), want) << dtype_name(dt);
  }
}

TEST(Dropout2d, RefusesBadInputs) {
  Generator g(13);
  DPL_EXPECT_ERROR(dropout2d(Variable(Tensor::ones({2, 3, 4})), 0.5f, g),
                   HasSubstr("dropout2d: expected an input (N, C, H, W) with 4 dimensions"));
  DPL_EXPECT_ERROR(dropout2d(Variable(Tensor::ones({2, 3, 4, 4})), 1.f, g),
                   HasSubstr("dropout2d: expected a drop probability p in [0, 1), got 1"));
  DPL_EXPECT_ERROR(nn::Dropout2d(nn::DropoutOptions(-0.1f)), HasSubstr("Dropout2d: expected a drop probability"));
}

}  // namespace
}  // namespace dpl
