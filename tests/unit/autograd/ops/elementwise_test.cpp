// Elementwise ops (add, sub, mul, div and pow and their broadcasts, relu and the other
// activations, exp, log, sqrt, rsqrt, abs, clamp, where, masked_fill, dropout, scalar arithmetic):
// forward values, gradients against finite differences, bad operands, and channels-last operands
// (tests/support/memory_formats.hpp). PyTorch's values are in elementwise_golden_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using test::away_from_zero;
using test::expect_same_values;
using test::FormatRun;
using test::gradcheck;
using test::is_nhwc;
using test::run_both;
using test::values;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

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
  std::vector<float> sig, th, ge, ge_tanh;
  for (double v : {-2.0, 0.0, 1.5}) {
    sig.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-v))));
    th.push_back(static_cast<float>(std::tanh(v)));
    ge.push_back(static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))));  // the exact erf form
    const double pi = std::acos(-1.0);
    const double inner = std::sqrt(2.0 / pi) * (v + 0.044715 * v * v * v);
    ge_tanh.push_back(static_cast<float>(0.5 * v * (1.0 + std::tanh(inner))));
  }
  EXPECT_THAT(sigmoid(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), sig));
  EXPECT_THAT(tanh(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), th));
  EXPECT_THAT(gelu(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), ge));
  EXPECT_THAT(gelu(x, GeluApproximation::kTanh).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), ge_tanh));
  // The approximation differs from the exact form by up to about 5e-4 near |x| = 2.
  EXPECT_NE(gelu(x, GeluApproximation::kTanh).data().to_vector<float>()[0], gelu(x).data().to_vector<float>()[0]);
  EXPECT_THAT(nn::GELU(GeluApproximation::kTanh).forward(x).data().to_vector<float>(),
              Pointwise(FloatNear(1e-6f), ge_tanh));
  EXPECT_EQ(nn::GELU().approximate(), GeluApproximation::kNone);
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
    EXPECT_TRUE(gradcheck([](const Vars& v) { return gelu(v[0], GeluApproximation::kTanh); }, {x}));
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

TEST(OpsForward, UnaryMathAndClamp) {
  const Variable x(Tensor::from_vector<float>({-2.f, -0.5f, 0.f, 1.f, 4.f}, {5}));
  EXPECT_THAT(values(abs(x).data()), ElementsAre(2.f, 0.5f, 0.f, 1.f, 4.f));
  EXPECT_THAT(values(neg(x).data()), ElementsAre(2.f, 0.5f, -0.f, -1.f, -4.f));
  EXPECT_THAT(values(clamp(x, -1.f, 2.f).data()), ElementsAre(-1.f, -0.5f, 0.f, 1.f, 2.f));
  EXPECT_THAT(values(clamp(x, 0.f, std::nullopt).data()), ElementsAre(0.f, 0.f, 0.f, 1.f, 4.f));
  EXPECT_THAT(values(clamp(x, std::nullopt, 0.f).data()), ElementsAre(-2.f, -0.5f, 0.f, 0.f, 0.f));
  EXPECT_THAT(values(clamp(x, 3.f, 1.f).data()), ElementsAre(1.f, 1.f, 1.f, 1.f, 1.f));  // min > max: max, as PyTorch
  const Variable p(Tensor::from_vector<float>({0.25f, 1.f, 4.f}, {3}));
  EXPECT_THAT(values(sqrt(p).data()), Pointwise(FloatNear(1e-6f), {0.5f, 1.f, 2.f}));
  EXPECT_THAT(values(rsqrt(p).data()), Pointwise(FloatNear(1e-6f), {2.f, 1.f, 0.5f}));
  EXPECT_THAT(values(log(exp(p)).data()), Pointwise(FloatNear(1e-6f), {0.25f, 1.f, 4.f}));
  EXPECT_THAT(values(pow(p, 2.f).data()), Pointwise(FloatNear(1e-6f), {0.0625f, 1.f, 16.f}));
  // Outside the domain: NaN (log and sqrt of a negative number); log(0) = -inf.
  const Variable neg_one(Tensor::from_vector<float>({-1.f, 0.f}, {2}));
  EXPECT_TRUE(std::isnan(values(log(neg_one).data())[0]));
  EXPECT_EQ(values(log(neg_one).data())[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(values(sqrt(neg_one).data())[0]));
  // clamp lets NaN through.
  const Variable nan(Tensor::from_vector<float>({std::nanf("")}, {1}));
  EXPECT_TRUE(std::isnan(values(clamp(nan, 0.f, 1.f).data())[0]));
}

TEST(OpsForward, DivAndPowBroadcastLikePyTorch) {
  const Variable a(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable col(Tensor::from_vector<float>({1, 2}, {2, 1}));
  const Variable b(Tensor::from_vector<float>({2}, {1}));
  EXPECT_THAT(values((a / col).data()), ElementsAre(1.f, 2.f, 3.f, 2.f, 2.5f, 3.f));
  EXPECT_THAT(values(div(a, b).data()), ElementsAre(0.5f, 1.f, 1.5f, 2.f, 2.5f, 3.f));
  const Variable r = pow(col, Variable(Tensor::from_vector<float>({0, 1, 2}, {3})));
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_THAT(values(r.data()), ElementsAre(1.f, 1.f, 1.f, 1.f, 2.f, 4.f));
  // (4, 1) and (1, 5) give (4, 5): both operands are broadcast.
  const Variable outer = mul(Variable(Tensor::ones({4, 1})), Variable(Tensor::ones({1, 5})));
  EXPECT_EQ(outer.shape(), (Shape{4, 5}));
  // A negative base to an integer power is real, as in PyTorch.
  EXPECT_FLOAT_EQ(pow(Variable(Tensor::full({1}, -2.0)), Variable(Tensor::full({1}, 3.0))).item(), -8.f);
}

TEST(OpsForward, WhereAndMaskedFill) {
  const Tensor cond = Tensor::from_vector<std::uint8_t>({1, 0, 1}, {3});
  const Variable a(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable b(Tensor::full({}, -1.0));
  EXPECT_THAT(values(where(cond, a, b).data()), ElementsAre(1.f, -1.f, 3.f, 4.f, -1.f, 6.f));
  const Tensor rows = Tensor::from_vector<std::uint8_t>({0, 1}, {2, 1});
  EXPECT_THAT(values(masked_fill(a, rows, 9.f).data()), ElementsAre(1.f, 2.f, 3.f, 9.f, 9.f, 9.f));
}

TEST(OpsGradient, UnaryMath) {
  Generator gen(41);
  const Tensor x = away_from_zero({3, 4}, gen, 0.2f, 1.5f);
  const Tensor positive = Tensor::uniform({3, 4}, 0.3f, 2.f, gen);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return exp(v[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return abs(v[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return neg(v[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return log(v[0]); }, {positive}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return sqrt(v[0]); }, {positive}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return rsqrt(v[0]); }, {positive}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return pow(v[0], 2.5f); }, {positive}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return pow(v[0], 3.f); }, {x}));
  // The bounds sit between the inputs' magnitudes, further than the step from any input.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return clamp(v[0], -0.15f, 0.15f); }, {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return clamp(v[0], 0.15f, std::nullopt); }, {x}));
}

TEST(OpsGradient, ClampGradientIsZeroOutside) {
  Variable x(Tensor::from_vector<float>({-2.f, -1.f, 0.f, 1.f, 2.f}, {5}), true);
  sum(clamp(x, -1.f, 1.f)).backward();
  EXPECT_THAT(values(x.grad()), ElementsAre(0.f, 1.f, 1.f, 1.f, 0.f));  // the bounds themselves pass, as PyTorch
  Variable z(Tensor::from_vector<float>({0.f, 2.f}, {2}), true);
  sum(abs(z) + pow(z, 0.f)).backward();
  EXPECT_THAT(values(z.grad()), ElementsAre(0.f, 1.f));  // abs'(0) = 0, d(z^0)/dz = 0
}

TEST(OpsGradient, DivAndPowWithBroadcasting) {
  Generator gen(43);
  const Tensor pos_a = Tensor::uniform({2, 3, 4}, 0.5f, 2.f, gen);
  const Tensor pos_b = Tensor::uniform({3, 1}, 0.5f, 2.f, gen);
  const Tensor exps = Tensor::uniform({3, 1}, -1.5f, 1.5f, gen);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return div(v[0], v[1]); }, {randn({2, 3, 4}, gen), pos_b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return div(v[0], v[1]); }, {randn({3, 4}, gen), pos_a}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return pow(v[0], v[1]); }, {pos_a, exps}));
  EXPECT_TRUE(
      gradcheck([](const Vars& v) { return pow(v[0], v[1]); }, {pos_b, Tensor::uniform({2, 3, 4}, -1.f, 1.f, gen)}));
  for (const auto& op : {add, sub, mul})
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return op(v[0], v[1]); }, {randn({4, 1, 3}, gen), randn({5, 1}, gen)}));
}

TEST(OpsGradient, PowAtZeroBaseFollowsPyTorch) {
  // d(a^b)/db = a^b log(a) is 0 at a == 0 for b >= 0 (not NaN); d/da is 0 where b == 0.
  Variable a(Tensor::from_vector<float>({0.f, 0.f, 2.f}, {3}), true);
  Variable b(Tensor::from_vector<float>({2.f, 0.f, 0.f}, {3}), true);
  sum(pow(a, b)).backward();
  EXPECT_THAT(values(b.grad()), ElementsAre(0.f, 0.f, FloatNear(std::log(2.f), 1e-6f)));
  EXPECT_THAT(values(a.grad()), ElementsAre(0.f, 0.f, 0.f));
}

TEST(OpsGradient, WhereAndMaskedFill) {
  Generator gen(47);
  const Tensor cond = Tensor::from_vector<std::uint8_t>({1, 0, 0, 1, 1, 0}, {3, 1, 2});
  EXPECT_TRUE(
      gradcheck([&](const Vars& v) { return where(cond, v[0], v[1]); }, {randn({3, 4, 2}, gen), randn({4, 1}, gen)}));
  const Tensor mask = Tensor::from_vector<std::uint8_t>({0, 1, 1, 0}, {4});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return masked_fill(v[0], mask, 3.f); }, {randn({2, 3, 4}, gen)}));
}

// cast: bfloat16 values are exact in float32, so float32 -> bfloat16 -> float32 keeps what bfloat16
// can hold; the gradient comes back in the input's dtype, whatever the output's.
TEST(OpsGradient, CastConvertsTheGradientBack) {
  Generator gen(9);
  const Tensor x0 = randn({2, 3}, gen).to(kBFloat16).to(kFloat32);
  Variable x(x0, true);
  const Variable y = cast(x, kBFloat16);
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(values(y.data().to(kFloat32)), values(x0));
  sum(mul(cast(y, kFloat32), Variable(Tensor::full({2, 3}, 3.f)))).backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_THAT(values(x.grad()), ::testing::Each(3.f));
  Variable same(x0, true);
  EXPECT_EQ(cast(same, kFloat32).data().data<float>(), x0.data<float>());  // no copy
  EXPECT_THAT(test::error_message([&] { cast(same, kInt32); }), HasSubstr("expected a float dtype to convert to"));
}

TEST(OpsErrors, ElementwiseRefusesBadOperands) {
  const Variable a(Tensor::zeros({2, 3})), b(Tensor::zeros({4}));
  DPL_EXPECT_ERROR(div(a, b), AllOf(HasSubstr("div"), HasSubstr("(2, 3)"), HasSubstr("(4,)"), HasSubstr("broadcast")));
  DPL_EXPECT_ERROR(pow(a, Variable(Tensor::zeros({3}, kBFloat16))), AllOf(HasSubstr("pow"), HasSubstr("one dtype")));
  DPL_EXPECT_ERROR(clamp(a, std::nullopt, std::nullopt), AllOf(HasSubstr("clamp"), HasSubstr("min and max")));
  DPL_EXPECT_ERROR(log(Variable(Tensor::zeros({2}, kInt32))), AllOf(HasSubstr("log"), HasSubstr("int32")));
  const Tensor float_mask = Tensor::zeros({3});
  DPL_EXPECT_ERROR(where(float_mask, a, a), AllOf(HasSubstr("where"), HasSubstr("uint8"), HasSubstr("float32")));
  DPL_EXPECT_ERROR(where(Tensor(), a, a), AllOf(HasSubstr("where"), HasSubstr("undefined")));
  const Tensor wide = Tensor::zeros({4, 3}, kUInt8);
  DPL_EXPECT_ERROR(masked_fill(a, wide, 1.f),
                   AllOf(HasSubstr("masked_fill"), HasSubstr("(2, 3)"), HasSubstr("(4, 3)")));
  DPL_EXPECT_ERROR(masked_fill(a, Tensor::zeros({3}, kUInt8), 1.f) + Variable(Tensor::zeros({5})),
                   AllOf(HasSubstr("add"), HasSubstr("(5,)")));
}

}  // namespace
}  // namespace dpl
