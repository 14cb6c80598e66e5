// Losses (softmax cross-entropy with label smoothing, negative log-likelihood, binary
// cross-entropy on probabilities and logits, mean squared, L1 and smooth L1 errors, each reduction)
// and accuracy: forward values by hand, the closed form of the cross-entropy's gradient, finite
// differences and bad operands. PyTorch's values are in elementwise_golden_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using test::gradcheck;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using Vars = std::vector<Variable>;

std::vector<float> values(const Tensor& t) { return t.contiguous().to(kFloat32).to_vector<float>(); }

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

TEST(OpsGradient, SoftmaxCrossEntropyGradientTakesOverTheLogitsOnlyWhenNothingElseHoldsThem) {
  // Logits computed by an op: when the caller keeps them, they must come out of backward as they
  // went in; when nobody does, the loss may write their gradient over them. Both give one gradient.
  Generator gen(23);
  const Tensor x0 = randn({6, 5}, gen, 2.f);
  const Tensor labels = Tensor::from_vector<std::int32_t>({4, 0, 1, 1, 3, 2}, {6});
  Variable x(x0.clone(), true);
  const Variable kept = add(x, x);
  const std::vector<float> before = values(kept.data());
  softmax_cross_entropy(kept, labels).backward();
  EXPECT_EQ(values(kept.data()), before);
  const std::vector<float> want = values(x.grad());
  for (const bool through_reshape : {false, true}) {
    Variable y(x0.clone(), true);
    Variable logits = through_reshape ? reshape(reshape(add(y, y), {30}), {6, 5}) : add(y, y);
    const Variable loss = softmax_cross_entropy(logits, labels);
    logits = Variable();  // the caller lets go of the logits
    loss.backward();
    EXPECT_THAT(values(y.grad()), Pointwise(FloatNear(0.f), want)) << "through_reshape " << through_reshape;
  }
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

TEST(OpsForward, NllLossReductionsAndIgnoreIndex) {
  const Variable logp(Tensor::from_vector<float>({-1, -2, -3, -4, -5, -6}, {3, 2}));
  const Tensor labels = Tensor::from_vector<std::int64_t>({1, -100, 0}, {3});
  EXPECT_THAT(values(nll_loss(logp, labels, -100, Reduction::kNone).data()), ElementsAre(2.f, 0.f, 5.f));
  EXPECT_FLOAT_EQ(nll_loss(logp, labels, -100, Reduction::kSum).item(), 7.f);
  EXPECT_FLOAT_EQ(nll_loss(logp, labels).item(), 3.5f);  // the ignored row is left out of the mean
  const Tensor int32_labels = Tensor::from_vector<std::int32_t>({1, 1, 0}, {3});
  EXPECT_FLOAT_EQ(nll_loss(logp, int32_labels).item(), (2.f + 4.f + 5.f) / 3.f);
  // Every label ignored: the mean is 0/0, as PyTorch.
  EXPECT_TRUE(std::isnan(nll_loss(logp, Tensor::full({3}, -100.0, kInt64)).item()));
  // (N, C, d): the class dimension is the second.
  const Variable logp3(Tensor::from_vector<float>({-1, -2, -3, -4}, {1, 2, 2}));
  const Tensor labels3 = Tensor::from_vector<std::int64_t>({1, 0}, {1, 2});
  EXPECT_THAT(values(nll_loss(logp3, labels3, -100, Reduction::kNone).data()), ElementsAre(3.f, 2.f));
}

TEST(OpsForward, PointwiseLossesAndReductions) {
  const Variable x(Tensor::from_vector<float>({0.f, 1.f, 3.f}, {3}));
  const Variable t(Tensor::from_vector<float>({0.5f, 1.f, 1.f}, {3}));
  EXPECT_THAT(values(l1_loss(x, t, Reduction::kNone).data()), ElementsAre(0.5f, 0.f, 2.f));
  EXPECT_FLOAT_EQ(l1_loss(x, t).item(), 2.5f / 3.f);
  EXPECT_THAT(values(smooth_l1_loss(x, t, Reduction::kNone, 1.f).data()), ElementsAre(0.125f, 0.f, 1.5f));
  EXPECT_FLOAT_EQ(smooth_l1_loss(x, t, Reduction::kSum, 0.f).item(), 2.5f);  // beta 0: l1
  EXPECT_THAT(values(mse_loss(x, t, Reduction::kNone).data()), ElementsAre(0.25f, 0.f, 4.f));
  EXPECT_FLOAT_EQ(mse_loss(x, t, Reduction::kSum).item(), 4.25f);
  // BCE clamps its logs at -100: a certain wrong answer costs 100, not infinity.
  const Variable p(Tensor::from_vector<float>({0.f, 1.f, 0.5f}, {3}));
  const Tensor y = Tensor::from_vector<float>({1.f, 1.f, 0.f}, {3});
  EXPECT_THAT(values(binary_cross_entropy(p, y, Reduction::kNone).data()),
              Pointwise(FloatNear(1e-5f), {100.f, 0.f, std::log(2.f)}));
  // With logits, extreme values stay finite and pos_weight scales the positive term.
  const Variable z(Tensor::from_vector<float>({-100.f, 100.f, 0.f}, {3}));
  EXPECT_THAT(values(binary_cross_entropy_with_logits(z, y, Reduction::kNone).data()),
              Pointwise(FloatNear(1e-4f), {100.f, 0.f, std::log(2.f)}));
  const Tensor w = Tensor::from_vector<float>({3.f}, {1});
  EXPECT_NEAR(binary_cross_entropy_with_logits(z, y, Reduction::kSum, w).item(), 300.f + std::log(2.f), 1e-3);
}

TEST(OpsGradient, NllAndPointwiseLosses) {
  Generator gen(61);
  const Tensor labels = Tensor::from_vector<std::int64_t>({2, -100, 0, 1}, {4});
  const Tensor labels3 = Tensor::from_vector<std::int32_t>({0, 2, 1, 1, 0, 2}, {2, 3});
  const Tensor probs = Tensor::uniform({3, 4}, 0.1f, 0.9f, gen);
  const Tensor targets = Tensor::uniform({3, 4}, 0.f, 1.f, gen);
  const Tensor pw = Tensor::uniform({4}, 0.5f, 3.f, gen);
  for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    SCOPED_TRACE(static_cast<int>(r));
    EXPECT_TRUE(
        gradcheck([&](const Vars& v) { return nll_loss(log_softmax(v[0]), labels, -100, r); }, {randn({4, 3}, gen)}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return nll_loss(v[0], labels3, -100, r); }, {randn({2, 3, 3}, gen)}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return binary_cross_entropy(v[0], targets, r); }, {probs}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return binary_cross_entropy_with_logits(v[0], targets, r, pw); },
                          {randn({3, 4}, gen)}));
    // x - t kept away from the kinks of |.| (0) and of smooth L1 (+-beta).
    const Tensor t = randn({3, 4}, gen);
    const Tensor x = (Variable(t) + Variable(test::away_from_zero({3, 4}, gen, 0.1f, 0.4f))).data();
    const Tensor x_far = (Variable(t) + Variable(test::away_from_zero({3, 4}, gen, 0.6f, 1.5f))).data();
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return l1_loss(v[0], v[1], r); }, {x, t}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return smooth_l1_loss(v[0], v[1], r, 0.5f); }, {x, t}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return smooth_l1_loss(v[0], v[1], r, 0.5f); }, {x_far, t}));
    EXPECT_TRUE(
        gradcheck([&](const Vars& v) { return mse_loss(v[0], v[1], r); }, {randn({3, 4}, gen), randn({3, 4}, gen)}));
  }
}

TEST(OpsErrors, LossesRefuseBadOperands) {
  const Variable logp(Tensor::zeros({3, 4}));
  DPL_EXPECT_ERROR(nll_loss(logp, Tensor::zeros({3})), AllOf(HasSubstr("nll_loss"), HasSubstr("int32 or int64")));
  DPL_EXPECT_ERROR(nll_loss(logp, Tensor::zeros({4}, kInt64)), AllOf(HasSubstr("nll_loss"), HasSubstr("(3,)")));
  DPL_EXPECT_ERROR(nll_loss(logp, Tensor::from_vector<std::int64_t>({0, 4, 1}, {3})),
                   AllOf(HasSubstr("nll_loss"), HasSubstr("[0, 4)"), HasSubstr("got 4")));
  DPL_EXPECT_ERROR(nll_loss(Variable(Tensor::zeros({4})), Tensor::zeros({4}, kInt64)),
                   AllOf(HasSubstr("nll_loss"), HasSubstr("(N, C)")));
  const Variable x(Tensor::zeros({2, 3}));
  DPL_EXPECT_ERROR(l1_loss(x, Variable(Tensor::zeros({3, 2}))), AllOf(HasSubstr("l1_loss"), HasSubstr("(3, 2)")));
  DPL_EXPECT_ERROR(smooth_l1_loss(x, x, Reduction::kMean, -1.f), AllOf(HasSubstr("smooth_l1_loss"), HasSubstr("beta")));
  DPL_EXPECT_ERROR(binary_cross_entropy(x, Tensor()), AllOf(HasSubstr("binary_cross_entropy"), HasSubstr("undefined")));
  DPL_EXPECT_ERROR(binary_cross_entropy_with_logits(x, Tensor::zeros({2, 3}), Reduction::kMean, Tensor::ones({2})),
                   AllOf(HasSubstr("pos_weight"), HasSubstr("(3,)"), HasSubstr("(2,)")));
  DPL_EXPECT_ERROR(mse_loss(Variable(Tensor::zeros({0})), Variable(Tensor::zeros({0})), Reduction::kSum),
                   AllOf(HasSubstr("mse_loss"), HasSubstr("non-empty")));
}

}  // namespace
}  // namespace dpl
