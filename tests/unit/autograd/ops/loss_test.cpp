// Losses (softmax cross-entropy with label smoothing, mean squared error) and accuracy: forward
// values by hand, the closed form of the cross-entropy's gradient, and finite differences.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using test::gradcheck;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

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

TEST(OpsGradient, SoftmaxCrossEntropy) {
  Generator gen(19);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 3, 1, 3, 2}, {5});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return softmax_cross_entropy(v[0], labels); },
                        {randn({5, 4}, gen, 2.f)}));
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

TEST(OpsGradient, SoftmaxCrossEntropyWithLabelSmoothing) {
  Generator gen(36);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 3, 1, 3, 2}, {5});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return softmax_cross_entropy(v[0], labels, 0.1f); },
                        {randn({5, 4}, gen, 2.f)}));
}

TEST(OpsGradient, MseLoss) {
  Generator gen(35);
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 2, 3}})
    EXPECT_TRUE(gradcheck([](const Vars& v) { return mse_loss(v[0], v[1]); }, {randn(s, gen), randn(s, gen)}));
}

}  // namespace
}  // namespace dpl
