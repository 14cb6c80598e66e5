// The differentiable ops: forward values against hand-computed results, and every gradient
// against finite differences (tests/support/gradcheck.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using test::away_from_zero;
using test::gradcheck;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

// --- the harness itself --------------------------------------------------------------------------

// y = x whose backward claims dy/dx = 2: a gradcheck that accepted it would accept anything.
class WrongGradNode final : public Node {
 public:
  const char* name() const override { return "wrong_grad"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const float* g = gy.data<float>();
    float* out = t[0].tensor->data<float>();
    for (std::int64_t i = 0; i < gy.numel(); ++i) out[i] = t[0].beta * out[i] + 2.f * g[i];
  }
};

Variable wrong_grad_identity(const Variable& x) {
  Tensor out = x.data().clone();
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<WrongGradNode>();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

TEST(Gradcheck, RejectsAWrongGradient) {
  Generator gen(1);
  const auto result = gradcheck([](const Vars& v) { return wrong_grad_identity(v[0]); }, {randn({3, 2}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("6 of 6 gradient elements disagree"));
}

// y = x with the right gradient, written without honouring beta: it overwrites earlier
// contributions instead of adding to them.
class OverwritingNode final : public Node {
 public:
  const char* name() const override { return "overwriting"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) t[0].tensor->copy_(gy);
  }
};

TEST(Gradcheck, RejectsABackwardThatIgnoresAccumulation) {
  Generator gen(3);
  const auto f = [](const Vars& v) {
    Tensor out = v[0].data().clone();
    if (!any_requires_grad({&v[0]})) return Variable(out);
    auto node = std::make_shared<OverwritingNode>();
    node->set_inputs({v[0]});
    return Variable::make_result(out, node);
  };
  const auto result = gradcheck(f, {randn({4}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("accumulating into an existing gradient"));
}

TEST(Gradcheck, RejectsAllZeroInputs) {
  const auto result = gradcheck([](const Vars& v) { return relu(v[0]); }, {Tensor::zeros({3})});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("all zeros"));
}

TEST(Gradcheck, RejectsAnInputThatReceivedNoGradient) {
  // The second input is never used, so backward leaves its gradient undefined.
  Generator gen(2);
  const auto result =
      gradcheck([](const Vars& v) { return mul(v[0], v[0]); }, {randn({2, 2}, gen), randn({2, 2}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("input 1 received no gradient"));
}

// --- forward values ------------------------------------------------------------------------------

TEST(OpsForward, Matmul) {
  const Variable a(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable b(Tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2}));
  const Variable y = matmul(a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_THAT(y.data().to_vector<float>(), ElementsAre(58, 64, 139, 154));
}

TEST(OpsForward, LinearWithAndWithoutBias) {
  const Variable x(Tensor::from_vector<float>({1, 2, -1, 3}, {2, 2}));
  const Variable w(Tensor::from_vector<float>({1, 0, 0, 1, 2, -1}, {3, 2}));
  const Variable b(Tensor::from_vector<float>({10, 20, 30}, {3}));
  EXPECT_THAT(linear(x, w, b).data().to_vector<float>(), ElementsAre(11, 22, 30, 9, 23, 25));
  EXPECT_THAT(linear(x, w).data().to_vector<float>(), ElementsAre(1, 2, 0, -1, 3, -5));
}

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

TEST(OpsForward, ReluReshapeFlatten) {
  const Variable x(Tensor::from_vector<float>({-1, 0, 2, -3, 4, 0.5f}, {2, 3}));
  EXPECT_THAT(relu(x).data().to_vector<float>(), ElementsAre(0, 0, 2, 0, 4, 0.5f));
  const Variable r = reshape(x, {3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_THAT(r.data().to_vector<float>(), ElementsAre(-1, 0, 2, -3, 4, 0.5f));
  EXPECT_EQ(flatten(Variable(Tensor::zeros({2, 1, 2, 3}))).shape(), (Shape{2, 6}));
  EXPECT_EQ(flatten(Variable(Tensor::zeros({2, 1, 2, 3})), 2).shape(), (Shape{2, 1, 6}));
}

TEST(OpsForward, SumAndMean) {
  const Variable x(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable s = sum(x), m = mean(x);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_FLOAT_EQ(s.item(), 21.f);
  EXPECT_FLOAT_EQ(m.item(), 3.5f);
}

TEST(OpsForward, SoftmaxCrossEntropyAndAccuracy) {
  const Variable logits(Tensor::from_vector<float>({1, 2, 3, 0, 0, 0, 5, -5, 0}, {3, 3}));
  const Tensor labels = Tensor::from_vector<std::int32_t>({2, 1, 1}, {3});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double lse1 = std::log(3.0);
  const double lse2 = std::log(std::exp(5.0) + std::exp(-5.0) + 1.0);
  const double expected = ((lse0 - 3.0) + (lse1 - 0.0) + (lse2 + 5.0)) / 3.0;
  const Variable loss = softmax_cross_entropy(logits, labels);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_NEAR(loss.item(), expected, 1e-5);
  // Row 0 picks class 2 (right), row 1 ties at class 0 (wrong), row 2 picks class 0 (wrong).
  EXPECT_NEAR(accuracy(logits, labels).item(), 1.0 / 3.0, 1e-6);
}

TEST(OpsForward, SoftmaxCrossEntropyStaysFiniteForExtremeLogits) {
  const Variable logits(Tensor::from_vector<float>({1000, -1000}, {1, 2}));
  const Variable loss = softmax_cross_entropy(logits, Tensor::from_vector<std::int32_t>({1}, {1}));
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(loss.item(), 2000.f, 1e-2);
}

// --- gradients -----------------------------------------------------------------------------------

TEST(OpsGradient, Matmul) {
  Generator gen(10);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, gen), randn({4, 5}, gen)}));
  // A square product of a variable with itself exercises two gradients into one leaf.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return matmul(v[0], v[0]); }, {randn({3, 3}, gen)}));
}

TEST(OpsGradient, LinearWithBias) {
  Generator gen(11);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return linear(v[0], v[1], v[2]); },
                        {randn({5, 3}, gen), randn({4, 3}, gen), randn({4}, gen)}));
}

TEST(OpsGradient, LinearWithoutBias) {
  Generator gen(12);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return linear(v[0], v[1]); }, {randn({5, 3}, gen), randn({4, 3}, gen)}));
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

TEST(OpsGradient, ReshapeAndFlatten) {
  Generator gen(17);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return reshape(v[0], {4, -1}); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return flatten(v[0]); }, {randn({2, 3, 2}, gen)}));
  // A reshape followed by an op that is sensitive to layout (a row broadcast) checks that the
  // gradient comes back in the input's element order.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mul(reshape(v[0], {3, 2}), v[1]); },
                        {randn({2, 3}, gen), randn({2}, gen)}));
}

TEST(OpsGradient, SumAndMean) {
  Generator gen(18);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return sum(v[0]); }, {randn({3, 5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mean(v[0]); }, {randn({3, 5}, gen)}));
  // Reductions inside a larger graph: the scalar gradient is broadcast back.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mul(v[0], mean(v[0])); }, {randn({2, 3}, gen)}));
}

TEST(OpsGradient, SoftmaxCrossEntropy) {
  Generator gen(19);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 3, 1, 3, 2}, {5});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return softmax_cross_entropy(v[0], labels); },
                        {randn({5, 4}, gen, 2.f)}));
}

TEST(OpsGradient, SmallNetworkEndToEnd) {
  Generator gen(20);
  const Tensor labels = Tensor::from_vector<std::int32_t>({1, 0, 2, 1}, {4});
  const auto net = [&](const Vars& v) {
    const Variable h = relu(linear(v[0], v[1], v[2]));
    return softmax_cross_entropy(linear(h, v[3], v[4]), labels);
  };
  // Large enough hidden pre-activations keep the relu kinks out of the finite-difference step.
  EXPECT_TRUE(gradcheck(net, {away_from_zero({4, 3}, gen, 0.5f, 1.f), randn({6, 3}, gen), away_from_zero({6}, gen),
                              randn({3, 6}, gen), randn({3}, gen)}));
}

TEST(OpsGradient, SoftmaxCrossEntropyHasTheClosedForm) {
  // d loss / d logits = (softmax - onehot) / N, written out independently of the kernels.
  Generator gen(21);
  const Tensor x = randn({3, 4}, gen);
  const Tensor labels = Tensor::from_vector<std::int32_t>({2, 0, 3}, {3});
  Variable logits(x.clone(), true);
  softmax_cross_entropy(logits, labels).backward();
  std::vector<double> expected;
  for (int r = 0; r < 3; ++r) {
    double z = 0;
    for (int j = 0; j < 4; ++j) z += std::exp(static_cast<double>(x.at<float>({r, j})));
    for (int j = 0; j < 4; ++j) {
      const double p = std::exp(static_cast<double>(x.at<float>({r, j}))) / z;
      expected.push_back((p - (j == labels.at<std::int32_t>({r}) ? 1.0 : 0.0)) / 3.0);
    }
  }
  EXPECT_THAT(logits.grad().to_vector<float>(), Pointwise(FloatNear(1e-6f), std::vector<float>(expected.begin(), expected.end())));
}

// --- activations, dropout, softmax, argmax, mean squared error, scalar arithmetic -----------------

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

TEST(OpsForward, SoftmaxLogSoftmaxAndArgmaxOverTheLastDimension) {
  Generator gen(30);
  const Variable x(randn({2, 3, 5}, gen));
  const std::vector<float> p = softmax(x).data().to_vector<float>(), lp = log_softmax(x).data().to_vector<float>();
  const std::vector<float> xv = x.data().to_vector<float>();
  const std::vector<std::int64_t> am = argmax(x).to_vector<std::int64_t>();
  ASSERT_EQ(argmax(x).shape(), (Shape{2, 3}));
  for (int r = 0; r < 6; ++r) {
    double z = 0;
    int best = 0;
    for (int j = 0; j < 5; ++j) {
      z += std::exp(static_cast<double>(xv[r * 5 + j]));
      if (xv[r * 5 + j] > xv[r * 5 + best]) best = j;
    }
    for (int j = 0; j < 5; ++j) {
      EXPECT_NEAR(p[r * 5 + j], std::exp(xv[r * 5 + j]) / z, 1e-6);
      EXPECT_NEAR(lp[r * 5 + j], xv[r * 5 + j] - std::log(z), 1e-5);
    }
    EXPECT_EQ(am[r], best);
  }
  // Ties go to the first index; a NaN wins; log_softmax stays finite where softmax underflows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Variable t(Tensor::from_vector<float>({1.f, 3.f, 3.f, 0.f, nan, 5.f, 1000.f, 0.f, -1000.f}, {3, 3}));
  EXPECT_THAT(argmax(t).to_vector<std::int64_t>(), ElementsAre(1, 1, 0));
  EXPECT_FLOAT_EQ(log_softmax(Variable(Tensor::from_vector<float>({1000.f, 0.f}, {2}))).data().to_vector<float>()[1],
                  -1000.f);
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

TEST(OpsForward, MseAndLabelSmoothing) {
  const Variable x(Tensor::from_vector<float>({1.f, 2.f, 3.f, 4.f}, {2, 2}));
  const Variable t(Tensor::from_vector<float>({0.f, 2.f, 5.f, 4.f}, {2, 2}));
  EXPECT_FLOAT_EQ(mse_loss(x, t).item(), (1.f + 4.f) / 4.f);
  // PyTorch's definition: the target is (1 - e) onehot + e / C, so the loss is
  // (1 - e) * nll + e * mean over classes of -log p.
  Generator gen(31);
  const Variable logits(randn({4, 5}, gen));
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 4, 2, 2}, {4});
  const float e = 0.2f;
  const std::vector<float> lp = log_softmax(logits).data().to_vector<float>();
  double want = 0;
  for (int r = 0; r < 4; ++r) {
    double uniform = 0;
    for (int j = 0; j < 5; ++j) uniform -= lp[r * 5 + j] / 5.0;
    want += ((1 - e) * -lp[r * 5 + labels.at<std::int32_t>({r})] + e * uniform) / 4.0;
  }
  EXPECT_NEAR(softmax_cross_entropy(logits, labels, e).item(), want, 1e-5);
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

TEST(OpsGradient, SoftmaxAndLogSoftmax) {
  Generator gen(34);
  for (const Shape& s : {Shape{6}, Shape{3, 4}, Shape{2, 3, 5}}) {
    EXPECT_TRUE(gradcheck([](const Vars& v) { return softmax(v[0]); }, {randn(s, gen)}));
    EXPECT_TRUE(gradcheck([](const Vars& v) { return log_softmax(v[0]); }, {randn(s, gen)}));
  }
}

TEST(OpsGradient, MseLoss) {
  Generator gen(35);
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 2, 3}})
    EXPECT_TRUE(gradcheck([](const Vars& v) { return mse_loss(v[0], v[1]); }, {randn(s, gen), randn(s, gen)}));
}

TEST(OpsGradient, SoftmaxCrossEntropyWithLabelSmoothing) {
  Generator gen(36);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 3, 1, 3, 2}, {5});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return softmax_cross_entropy(v[0], labels, 0.1f); },
                        {randn({5, 4}, gen, 2.f)}));
}

TEST(OpsGradient, ScalarArithmetic) {
  Generator gen(37);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return 3.f - v[0] * 2.f / 5.f + 1.f; }, {randn({2, 3, 2}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return -(0.5f * v[0] - 1.f); }, {randn({4}, gen)}));
}

}  // namespace
}  // namespace dpl
