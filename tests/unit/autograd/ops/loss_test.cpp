// Losses (softmax cross-entropy with label smoothing, negative log-likelihood, binary
// cross-entropy on probabilities and logits, mean squared, L1 and smooth L1 errors, each reduction)
// and accuracy: forward values by hand, the closed form of the cross-entropy's gradient, finite
// differences and bad operands. PyTorch's values are in elementwise_golden_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
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

// --- linear_cross_entropy: the fused head and loss against linear then softmax_cross_entropy ---

// The loss and the gradients of x, weight and (when given) bias, from `loss_of` run on fresh
// leaves holding these values, with an upstream gradient (2.5 by default: not 1, so that
// backward's scaling by the upstream gradient counts).
struct LossAndGrads {
  float loss;
  std::vector<float> gx, gw, gb;
};
template <typename LossOf>
LossAndGrads loss_and_grads(const Tensor& x0, const Tensor& w0, const Tensor& b0, float upstream, LossOf&& loss_of) {
  Variable x(x0.clone(), true), w(w0.clone(), true), b;
  if (b0.defined()) b = Variable(b0.clone(), true);
  const Variable loss = loss_of(x, w, b);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_EQ(loss.data().dtype(), x0.dtype());
  (loss * upstream).backward();
  return {loss.item(), values(x.grad()), values(w.grad()), b.defined() ? values(b.grad()) : std::vector<float>{}};
}

LossAndGrads unfused(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& labels, float smoothing = 0.f,
                     float upstream = 2.5f) {
  return loss_and_grads(x, w, b, upstream, [&](const Variable& vx, const Variable& vw, const Variable& vb) {
    return softmax_cross_entropy(linear(vx, vw, vb), labels, smoothing);
  });
}

LossAndGrads fused(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& labels,
                   std::int64_t chunk_rows, float smoothing = 0.f, float upstream = 2.5f) {
  return loss_and_grads(x, w, b, upstream, [&](const Variable& vx, const Variable& vw, const Variable& vb) {
    LinearCrossEntropyOptions o;
    o.chunk_rows = chunk_rows;
    o.label_smoothing = smoothing;
    o.bias = vb;
    return linear_cross_entropy(vx, vw, labels, o);
  });
}

// Every element of got within atol + rtol * max|want| of want's (a gradient's error scales with
// its largest element, not with each element, since each is a sum of products).
void expect_near(const std::vector<float>& got, const std::vector<float>& want, float rtol, float atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0.f;
  for (float v : want) scale = std::max(scale, std::abs(v));
  const float tol = atol + rtol * scale;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i << " (largest |value| " << scale << ")";
}

void expect_same_loss(const LossAndGrads& got, const LossAndGrads& want, float rtol, float atol,
                      const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, atol + rtol * std::abs(want.loss)) << what << " loss";
  expect_near(got.gx, want.gx, rtol, atol, what + " grad of x");
  expect_near(got.gw, want.gw, rtol, atol, what + " grad of weight");
  expect_near(got.gb, want.gb, rtol, atol, what + " grad of bias");
}

Tensor random_labels(std::int64_t n, std::int64_t classes, Generator& gen) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(classes)));
  return Tensor::from_vector(v, {n});
}

// A head's operands: x (n, c), weight (v, c), bias (v,) and labels, drawn from seed.
struct Head {
  Tensor x, w, b, labels;
};
Head random_head(std::uint64_t seed, std::int64_t n, std::int64_t c, std::int64_t v) {
  Generator gen(seed);
  Head h;
  h.x = randn({n, c}, gen);
  h.w = randn({v, c}, gen, 0.5f);
  h.b = randn({v}, gen, 0.3f);
  h.labels = random_labels(n, v, gen);
  return h;
}

TEST(OpsGradient, LinearCrossEntropyEqualsLinearThenSoftmaxCrossEntropyForEveryChunking) {
  // 13 rows: chunks of 5 and 4 leave a short last chunk, 1 makes every row a chunk, 13 is one
  // chunk exactly, 40 is larger than the rows, 0 lets the op choose (one chunk here).
  const Head h = random_head(41, 13, 6, 17);
  for (const bool with_bias : {false, true}) {
    for (const float smoothing : {0.f, 0.1f}) {
      const Tensor bias = with_bias ? h.b : Tensor();
      const LossAndGrads want = unfused(h.x, h.w, bias, h.labels, smoothing);
      for (const std::int64_t rows : {5, 4, 1, 13, 40, 0}) {
        const std::string what = "chunk_rows " + std::to_string(rows) + (with_bias ? " with bias" : "") +
                                 " smoothing " + std::to_string(smoothing);
        // float32: the chunks' sums run in another order than the whole product's; nothing else differs.
        expect_same_loss(fused(h.x, h.w, bias, h.labels, rows, smoothing), want, 1e-5f, 1e-6f, what);
      }
    }
  }
}

TEST(OpsGradient, LinearCrossEntropyInBfloat16AndFloat16MatchesTheUnfusedLoss) {
  // 16-bit: the logits' gradient is rounded per chunk from the chunk's mean instead of from the
  // whole mean, which moves single elements by a unit in the last place. Tolerance: 4 eps of the
  // largest element of each result, eps = 2^-7 for bfloat16 and 2^-10 for float16 (0.4 eps seen).
  const Head h = random_head(43, 37, 8, 29);
  for (const DType dt : {kBFloat16, kFloat16}) {
    const float eps = dt == kBFloat16 ? 1.f / 128 : 1.f / 1024;
    const Tensor x = h.x.to(dt), w = h.w.to(dt), b = h.b.to(dt);
    const LossAndGrads want = unfused(x, w, b, h.labels);
    for (const std::int64_t rows : {1, 10, 0}) {
      expect_same_loss(fused(x, w, b, h.labels, rows), want, 4.f * eps, 0.f,
                       std::string(dtype_name(dt)) + " chunk_rows " + std::to_string(rows));
    }
  }
}

TEST(OpsGradient, LinearCrossEntropyInFloat16KeepsTheGradientsALossScaleLifts) {
  // float16 trains under a loss scale because the gradients of a mean over many rows fall below
  // its normal range (6.1e-5). Here x's are about 1e-6 for an upstream gradient of 1 (4096 rows,
  // a small weight) and the logits' about 4e-6; the op must not store either in float16 before
  // backward brings the loss scale (1024), or they lose whole percents to float16's subnormals.
  // Tolerance: 4 eps (2^-10) of each result's largest element, as above.
  const Head h = random_head(53, 4096, 8, 64);
  const Tensor x = h.x.to(kFloat16), w = (h.w * 0.02f).to(kFloat16);
  const LossAndGrads want = unfused(x, w, Tensor(), h.labels, 0.f, 1024.f);
  for (const std::int64_t rows : {1000, 0})
    expect_same_loss(fused(x, w, Tensor(), h.labels, rows, 0.f, 1024.f), want, 4.f / 1024, 0.f,
                     "chunk_rows " + std::to_string(rows));
  // The logits' gradient of one row of a 4096-row chunk is 1/4096 of the row's (softmax - target):
  // 2.6e-8 for a class of probability 1.1e-4, which float16 flushes to zero. 4096 equal rows make
  // every row's error add up in that class's weight gradient; each element must match to 1%.
  const std::int64_t n = 4096;
  const Tensor xs = Tensor::from_vector(std::vector<float>(2 * n, 1.f), {n, 2}).to(kFloat16);
  const Tensor ws = Tensor::from_vector<float>({0, 0, -7, 0, 2, 0, -3, 0}, {4, 2}).to(kFloat16);  // logits 0, -7, 2, -3
  const Tensor ys = Tensor::from_vector(std::vector<std::int32_t>(n, 2), {n});
  const LossAndGrads each_want = unfused(xs, ws, Tensor(), ys, 0.f, 1024.f);
  const LossAndGrads each_got = fused(xs, ws, Tensor(), ys, 0, 0.f, 1024.f);
  for (std::size_t i = 0; i < each_want.gw.size(); ++i)
    EXPECT_NEAR(each_got.gw[i], each_want.gw[i], 0.01f * std::abs(each_want.gw[i])) << "grad of weight element " << i;
}

TEST(OpsGradient, LinearCrossEntropySumsTheWeightGradientOfManyChunksBeforeRoundingIt) {
  // 1024 equal rows, one per chunk: every chunk adds the same share to the weight's gradient. A
  // bfloat16 sum taken chunk by chunk would stop growing at about 256 shares (a share is then
  // below half a unit in the last place of the sum) and end near half the true value; summed in
  // float32 and rounded once it is the unfused loss's within a unit in the last place.
  const std::int64_t n = 1024;
  const Tensor x = Tensor::full({n, 2}, 0.75).to(kBFloat16);
  const Tensor w = Tensor::from_vector<float>({0.5f, -0.25f, 1.f, 0.125f, -0.5f, 0.f}, {3, 2}).to(kBFloat16);
  const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>(n, 1), {n});
  const LossAndGrads want = unfused(x, w, Tensor(), labels), got = fused(x, w, Tensor(), labels, 1);
  expect_near(got.gw, want.gw, 1.f / 128, 0.f, "grad of weight");
  expect_near(got.gx, want.gx, 1.f / 128, 0.f, "grad of x");
}

TEST(OpsGradient, LinearCrossEntropyGradcheck) {
  Generator gen(45);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 4, 2, 4, 1}, {5});
  LinearCrossEntropyOptions o;
  o.chunk_rows = 2;
  o.label_smoothing = 0.05f;
  EXPECT_TRUE(gradcheck(
      [&](const Vars& v) {
        LinearCrossEntropyOptions with_bias = o;
        with_bias.bias = v[2];
        return linear_cross_entropy(v[0], v[1], labels, with_bias);
      },
      {randn({5, 3}, gen), randn({5, 3}, gen), randn({5}, gen)}));
}

TEST(OpsGradient, LinearCrossEntropyWithATiedWeightAddsBothGradients) {
  // The weight is also an embedding table that makes x (as GPT-2 ties its head to wte): its
  // gradient is the embedding's plus the head's, as with the unfused loss. (The head's backward
  // runs first here; adding onto an existing gradient is tested below.)
  Generator gen(47);
  const std::int64_t v = 11, c = 4, n = 9;
  const Tensor w0 = randn({v, c}, gen);
  const Tensor ids = Tensor::from_vector<std::int64_t>({3, 0, 10, 3, 7, 7, 1, 5, 2}, {n});
  const Tensor labels = random_labels(n, v, gen);
  const auto run = [&](bool fuse) {
    Variable w(w0.clone(), true);
    const Variable h = tanh(embedding(ids, w));
    LinearCrossEntropyOptions o;
    o.chunk_rows = 4;
    const Variable loss = fuse ? linear_cross_entropy(h, w, labels, o) : softmax_cross_entropy(linear(h, w), labels);
    loss.backward();
    return std::make_pair(loss.item(), values(w.grad()));
  };
  const auto [fused_loss, fused_grad] = run(true);
  const auto [loss, grad] = run(false);
  EXPECT_NEAR(fused_loss, loss, 1e-6f);
  expect_near(fused_grad, grad, 1e-5f, 1e-6f, "tied weight");
  // Both paths matter: the head's part alone differs from the sum.
  Variable w(w0.clone(), true);
  softmax_cross_entropy(linear(Variable(tanh(embedding(ids, Variable(w0))).data()), w), labels).backward();
  EXPECT_GT(std::abs(values(w.grad())[0] - grad[0]) + std::abs(values(w.grad())[12] - grad[12]), 1e-4f);
}

TEST(OpsGradient, LinearCrossEntropyGivesOnlyTheGradientsAskedForAndAddsToExistingOnes) {
  Generator gen(49);
  const Tensor x0 = randn({7, 3}, gen), w0 = randn({5, 3}, gen), labels = random_labels(7, 5, gen);
  const LossAndGrads want = unfused(x0, w0, Tensor(), labels);
  LinearCrossEntropyOptions o;
  o.chunk_rows = 3;
  {
    Variable x(x0.clone(), true);
    const Variable w(w0.clone());
    (linear_cross_entropy(x, w, labels, o) * 2.5f).backward();
    expect_near(values(x.grad()), want.gx, 1e-5f, 1e-6f, "x alone");
    EXPECT_FALSE(w.grad().defined());
  }
  {
    const Variable x(x0.clone());
    Variable w(w0.clone(), true);
    (linear_cross_entropy(x, w, labels, o) * 2.5f).backward();
    expect_near(values(w.grad()), want.gw, 1e-5f, 1e-6f, "weight alone");
  }
  {
    // Two backward passes add up (the second writes with beta 1), and an x made by an op gets its
    // gradient handed on (the op's own buffer, scaled in place).
    Variable x(x0.clone(), true), w(w0.clone(), true);
    for (int pass = 0; pass < 2; ++pass) (linear_cross_entropy(x * 1.f, w, labels, o) * 2.5f).backward();
    std::vector<float> twice_x = want.gx, twice_w = want.gw;
    for (float& e : twice_x) e *= 2.f;
    for (float& e : twice_w) e *= 2.f;
    expect_near(values(x.grad()), twice_x, 1e-5f, 1e-6f, "x, two passes");
    expect_near(values(w.grad()), twice_w, 1e-5f, 1e-6f, "weight, two passes");
  }
}

TEST(OpsForward, LinearCrossEntropyWithoutGradientsIsTheLossAlone) {
  Generator gen(51);
  const Tensor x0 = randn({10, 4}, gen), w0 = randn({6, 4}, gen), labels = random_labels(10, 6, gen);
  const float want = softmax_cross_entropy(linear(Variable(x0), Variable(w0)), labels).item();
  const Variable x(x0, true), w(w0, true);
  LinearCrossEntropyOptions o;
  o.chunk_rows = 3;
  {
    const NoGradGuard no_grad;
    const Variable loss = linear_cross_entropy(x, w, labels, o);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_NEAR(loss.item(), want, 1e-6f);
  }
  const Variable loss = linear_cross_entropy(Variable(x0), Variable(w0), labels, o);  // no leaf wants one
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_NEAR(loss.item(), want, 1e-6f);
}

TEST(OpsErrors, LinearCrossEntropyRefusesBadOperands) {
  const Variable x(Tensor::zeros({4, 3})), w(Tensor::zeros({5, 3}));
  const Tensor y = Tensor::from_vector<std::int32_t>({0, 1, 4, 2}, {4});
  const auto with = [](auto set) {
    LinearCrossEntropyOptions o;
    set(o);
    return o;
  };
  DPL_EXPECT_ERROR(linear_cross_entropy(Variable(Tensor::zeros({4})), w, y),
                   AllOf(HasSubstr("linear_cross_entropy"), HasSubstr("an input (N, C) with 2 dimensions"),
                         HasSubstr("got shape (4,)")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, Variable(Tensor::zeros({5, 2})), y),
                   AllOf(HasSubstr("expected a weight of shape (V, 3)"), HasSubstr("(4, 3)"), HasSubstr("got (5, 2)")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, Variable(Tensor::zeros({5, 3}, kBFloat16)), y),
                   AllOf(HasSubstr("one dtype"), HasSubstr("float32"), HasSubstr("bfloat16")));
  DPL_EXPECT_ERROR(linear_cross_entropy(Variable(Tensor::zeros({0, 3})), w, Tensor::zeros({0}, kInt32)),
                   AllOf(HasSubstr("at least one row"), HasSubstr("(0, 3)")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, Tensor::zeros({4}, kInt64)),
                   AllOf(HasSubstr("labels of dtype int32"), HasSubstr("int64")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, Tensor::zeros({5}, kInt32)),
                   AllOf(HasSubstr("labels of shape (4,)"), HasSubstr("got (5,)")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, Tensor::from_vector<std::int32_t>({0, 5, 1, 1}, {4})),
                   AllOf(HasSubstr("labels in [0, 5)"), HasSubstr("[0, 5]")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, Tensor()), HasSubstr("expected labels, got an undefined tensor"));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, y, with([](auto& o) { o.bias = Variable(Tensor::zeros({4})); })),
                   AllOf(HasSubstr("bias of shape (5,)"), HasSubstr("got (4,)")));
  DPL_EXPECT_ERROR(
      linear_cross_entropy(x, w, y, with([](auto& o) { o.bias = Variable(Tensor::zeros({5}, kFloat16)); })),
      AllOf(HasSubstr("one dtype"), HasSubstr("float16"), HasSubstr("a bias")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, y, with([](auto& o) { o.label_smoothing = 1.f; })),
                   AllOf(HasSubstr("label_smoothing in [0, 1)"), HasSubstr("got 1")));
  DPL_EXPECT_ERROR(linear_cross_entropy(x, w, y, with([](auto& o) { o.chunk_rows = -2; })),
                   AllOf(HasSubstr("chunk_rows >= 0"), HasSubstr("got -2")));
}

}  // namespace
}  // namespace dpl
