// Elementwise ops (add, sub, mul and their broadcasts, relu and the other activations, dropout,
// scalar arithmetic): forward values, gradients against finite differences, and channels-last
// operands (tests/support/memory_formats.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using test::away_from_zero;
using test::gradcheck;
using test::expect_same_values;
using test::FormatRun;
using test::is_nhwc;
using test::run_both;
using test::values;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

TEST(OpsForward, ElementwiseAndBroadcasts) {
  const Variable a(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  const Variable same(Tensor::from_vector<float>({10, 20, 30, 40}, {2, 2}));
  const Variable row(Tensor::from_vector<float>({10, 20}, {2}));
  const Variable one(Tensor::from_vector<float>({3}, {1}));
  const Variable scalar(Tensor::full({}, -1.0));
  EXPECT_THAT(add(a, same).data().to_vector<float>(), ElementsAre(11, 22, 33, 44));
  EXPECT_THAT(sub(a, same).data().to_vector<float>(), ElementsAre(-9, -18, -27, -36));
  EXPECT_THAT(mul(a, same).data().to_vector<float>(), ElementsAre(10, 40, 90, 160));
  EXPECT_THAT(add(a, row).data().to_vector<float>(), ElementsAre(11, 22, 13, 24));
  EXPECT_THAT(sub(a, row).data().to_vector<float>(), ElementsAre(-9, -18, -7, -16));
  EXPECT_THAT(mul(a, row).data().to_vector<float>(), ElementsAre(10, 40, 30, 80));
  EXPECT_THAT(mul(a, one).data().to_vector<float>(), ElementsAre(3, 6, 9, 12));
  EXPECT_THAT(sub(a, scalar).data().to_vector<float>(), ElementsAre(2, 3, 4, 5));
  EXPECT_THAT((a + same - row * one).data().to_vector<float>(), ElementsAre(-19, -38, 3, -16));
}

TEST(OpsForward, ReluPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = relu(Variable(Tensor::from_vector<float>({nan, -1.f, 2.f}, {3}))).data().to_vector<float>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.f);
  EXPECT_EQ(y[2], 2.f);
  EXPECT_TRUE(std::isnan(leaky_relu(Variable(Tensor::from_vector<float>({nan}, {1})), 0.1f).item()));
}

TEST(OpsForward, Activations) {
  const Variable x(Tensor::from_vector<float>({-2.f, 0.f, 1.5f}, {3}));
  EXPECT_THAT(leaky_relu(x, 0.1f).data().to_vector<float>(), Pointwise(FloatNear(1e-7f), {-0.2f, 0.f, 1.5f}));
  std::vector<float> sig, th, ge;
  for (double v : {-2.0, 0.0, 1.5}) {
    sig.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-v))));
    th.push_back(static_cast<float>(std::tanh(v)));
    ge.push_back(static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))));  // the exact erf form
  }
  EXPECT_THAT(sigmoid(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), sig));
  EXPECT_THAT(tanh(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), th));
  EXPECT_THAT(gelu(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), ge));
}

TEST(OpsForward, DropoutIsInvertedSeededAndOffOutsideTraining) {
  const Variable x(Tensor::ones({64, 64}));
  Generator g1(5), g2(5);
  const std::vector<float> a = dropout(x, 0.25f, g1).data().to_vector<float>();
  EXPECT_EQ(dropout(x, 0.25f, g2).data().to_vector<float>(), a);  // same generator state, same mask
  std::int64_t kept = 0;
  for (float v : a) {
    ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.75f) < 1e-6f) << v;
    kept += v != 0.f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / 4096.0, 0.75, 0.03);
  EXPECT_NE(dropout(x, 0.25f, g1).data().to_vector<float>(), a);  // the generator moved on
  EXPECT_EQ(dropout(x, 0.5f, g1, false).id(), x.id());
  EXPECT_EQ(dropout(x, 0.f, g1).id(), x.id());
}

TEST(OpsForward, ScalarArithmetic) {
  const Variable x(Tensor::from_vector<float>({1.f, -2.f}, {2}));
  const auto v = [](const Variable& y) { return y.data().to_vector<float>(); };
  EXPECT_THAT(v(x * 2.f), ElementsAre(2.f, -4.f));
  EXPECT_THAT(v(2.f * x), ElementsAre(2.f, -4.f));
  EXPECT_THAT(v(x + 1.f), ElementsAre(2.f, -1.f));
  EXPECT_THAT(v(1.f + x), ElementsAre(2.f, -1.f));
  EXPECT_THAT(v(x - 1.f), ElementsAre(0.f, -3.f));
  EXPECT_THAT(v(1.f - x), ElementsAre(0.f, 3.f));
  EXPECT_THAT(v(x / 4.f), ElementsAre(0.25f, -0.5f));
  EXPECT_THAT(v(-x), ElementsAre(-1.f, 2.f));
  EXPECT_THAT(v(x + x - x * x), ElementsAre(1.f, -8.f));
}

struct BinaryCase {
  const char* name;
  Variable (*op)(const Variable&, const Variable&);
};

const BinaryCase kBinaryOps[] = {{"add", &add}, {"sub", &sub}, {"mul", &mul}};

TEST(OpsGradient, ElementwiseSameShape) {
  Generator gen(13);
  for (const auto& c : kBinaryOps) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({3, 4}, gen), randn({3, 4}, gen)}));
  }
}

TEST(OpsGradient, ElementwiseRowBroadcast) {
  Generator gen(14);
  for (const auto& c : kBinaryOps) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({3, 4}, gen), randn({4}, gen)}));
    // Rows of a 3-D tensor: the bias is broadcast over every leading index.
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({2, 3, 4}, gen), randn({4}, gen)}));
  }
}

TEST(OpsGradient, ElementwiseOneElementBroadcast) {
  Generator gen(15);
  for (const auto& c : kBinaryOps) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({3, 4}, gen), randn({1}, gen)}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({3, 4}, gen), randn({}, gen)}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return c.op(v[0], v[1]); }, {randn({2, 3}, gen), randn({1, 1}, gen)}));
  }
}

TEST(OpsGradient, Relu) {
  Generator gen(16);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return relu(v[0]); }, {away_from_zero({4, 5}, gen)}));
}

TEST(OpsGradient, Activations) {
  Generator gen(32);
  for (const Shape& s : {Shape{7}, Shape{3, 4}, Shape{2, 3, 2, 2}}) {
    // Away from zero: leaky_relu's kink must stay outside the finite-difference step.
    const Tensor x = away_from_zero(s, gen, 0.1f, 2.f);
    EXPECT_TRUE(gradcheck([](const Vars& v) { return leaky_relu(v[0], 0.2f); }, {x}));
    EXPECT_TRUE(gradcheck([](const Vars& v) { return sigmoid(v[0]); }, {x}));
    EXPECT_TRUE(gradcheck([](const Vars& v) { return tanh(v[0]); }, {x}));
    EXPECT_TRUE(gradcheck([](const Vars& v) { return gelu(v[0]); }, {x}));
  }
}

TEST(OpsGradient, Dropout) {
  Generator data(33);
  for (const Shape& s : {Shape{40}, Shape{4, 3, 5}}) {
    // A fresh generator per call: gradcheck evaluates f many times and needs the same mask each time.
    EXPECT_TRUE(gradcheck(
        [](const Vars& v) {
          Generator g(7);
          return dropout(v[0], 0.3f, g);
        },
        {randn(s, data)}));
  }
}

TEST(OpsGradient, ScalarArithmetic) {
  Generator gen(37);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return 3.f - v[0] * 2.f / 5.f + 1.f; }, {randn({2, 3, 2}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return -(0.5f * v[0] - 1.f); }, {randn({4}, gen)}));
}

TEST(MemoryFormat, ElementwiseOpsKeepChannelsLastWithoutCopies) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) {
    return tanh(sigmoid(gelu(leaky_relu(relu(x * y + x) * 2.f - y, 0.1f))));
  });
  EXPECT_TRUE(is_nhwc(r.out.data()));
  EXPECT_TRUE(is_nhwc(r.x.grad()));
  EXPECT_TRUE(is_nhwc(r.y.grad()));
}

TEST(MemoryFormat, OperandsInTwoFormatsGiveTheSameResultAndGradients) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) { return x * y - y; }, /*y_channels_last=*/false);
  EXPECT_TRUE(is_nhwc(r.out.data()));  // the first operand's format
  EXPECT_TRUE(is_nhwc(r.x.grad()));
  EXPECT_TRUE(r.y.grad().is_contiguous());  // each gradient in its variable's format
}

TEST(MemoryFormat, DropoutGradientFollowsTheForwardMask) {
  Generator gen(9);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, 0.5f, 1.f, gen).to_channels_last();
  Variable xl(x, true);
  Generator drop(11);
  Variable out = dropout(xl, 0.5f, drop, true);
  EXPECT_TRUE(is_nhwc(out.data()));
  sum(out).backward();
  // Where the output kept an element (scaled by 2), the gradient is 2; where it dropped it, 0.
  const std::vector<float> o = values(out.data()), g = values(xl.grad());
  int kept = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    EXPECT_FLOAT_EQ(g[i], o[i] != 0.f ? 2.f : 0.f) << i;
    kept += o[i] != 0.f;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<int>(o.size()));
}

}  // namespace
}  // namespace dpl
