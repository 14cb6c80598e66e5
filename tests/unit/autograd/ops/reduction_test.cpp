// Reductions (sum, mean over all elements and along dimensions, max, min, argmax, argmin,
// softmax, log_softmax): forward values, gradients against finite differences, bad dimensions,
// and channels-last inputs (tests/support/memory_formats.hpp). PyTorch's values are in
// elementwise_golden_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

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

TEST(OpsForward, SumAndMean) {
  const Variable x(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable s = sum(x), m = mean(x);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_FLOAT_EQ(s.item(), 21.f);
  EXPECT_FLOAT_EQ(m.item(), 3.5f);
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

TEST(OpsGradient, SumAndMean) {
  Generator gen(18);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return sum(v[0]); }, {randn({3, 5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mean(v[0]); }, {randn({3, 5}, gen)}));
  // Reductions inside a larger graph: the scalar gradient is broadcast back.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mul(v[0], mean(v[0])); }, {randn({2, 3}, gen)}));
}

TEST(OpsGradient, SoftmaxAndLogSoftmax) {
  Generator gen(34);
  for (const Shape& s : {Shape{6}, Shape{3, 4}, Shape{2, 3, 5}}) {
    EXPECT_TRUE(gradcheck([](const Vars& v) { return softmax(v[0]); }, {randn(s, gen)}));
    EXPECT_TRUE(gradcheck([](const Vars& v) { return log_softmax(v[0]); }, {randn(s, gen)}));
  }
}

TEST(MemoryFormat, ReductionsDropoutAndMseAcceptChannelsLast) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) {
    Generator g(3);
    return add(mse_loss(x, y), mean(dropout(x, 0.f, g, true)) + sum(x * y));
  });
  EXPECT_TRUE(is_nhwc(r.x.grad()));
}

TEST(OpsForward, SumMeanAlongDimensions) {
  const Variable x(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_THAT(values(sum(x, {0}).data()), ElementsAre(5.f, 7.f, 9.f));
  EXPECT_EQ(sum(x, {0}).shape(), (Shape{3}));
  EXPECT_EQ(sum(x, {-1}, true).shape(), (Shape{2, 1}));
  EXPECT_THAT(values(sum(x, {-1}, true).data()), ElementsAre(6.f, 15.f));
  EXPECT_THAT(values(mean(x, {1}).data()), ElementsAre(2.f, 5.f));
  EXPECT_EQ(sum(x, {0, 1}).shape(), Shape{});
  EXPECT_FLOAT_EQ(mean(x, {}).item(), 3.5f);  // no dimensions: all of them, as PyTorch
  // Dimensions that are not adjacent: (2, 3, 4) over 0 and 2 leaves (3,).
  const Variable y(Tensor::ones({2, 3, 4}));
  EXPECT_THAT(values(sum(y, {0, 2}).data()), ElementsAre(8.f, 8.f, 8.f));
  EXPECT_EQ(sum(y, {2, 0}, true).shape(), (Shape{1, 3, 1}));
}

TEST(OpsForward, MaxMinArgmaxAlongADimension) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Variable x(Tensor::from_vector<float>({3, 1, 3, 2, 5, -1}, {2, 3}));
  const ValuesIndices m = max(x, 1);
  EXPECT_THAT(values(m.values.data()), ElementsAre(3.f, 5.f));
  EXPECT_EQ(m.indices.dtype(), kInt64);
  EXPECT_THAT(m.indices.to_vector<std::int64_t>(), ElementsAre(0, 1));  // the first of the tied 3s
  const ValuesIndices lo = min(x, 0, true);
  EXPECT_EQ(lo.values.shape(), (Shape{1, 3}));
  EXPECT_THAT(values(lo.values.data()), ElementsAre(2.f, 1.f, -1.f));
  EXPECT_THAT(lo.indices.to_vector<std::int64_t>(), ElementsAre(1, 0, 1));
  EXPECT_THAT(argmax(x, -2).to_vector<std::int64_t>(), ElementsAre(0, 1, 0));
  EXPECT_THAT(argmin(x, 1, true).to_vector<std::int64_t>(), ElementsAre(1, 2));
  // NaN wins in both directions, as PyTorch propagates it.
  const Variable n(Tensor::from_vector<float>({1, nan, 2}, {3}));
  EXPECT_TRUE(std::isnan(max(n, 0).values.item()));
  EXPECT_EQ(min(n, 0).indices.to_vector<std::int64_t>()[0], 1);
}

TEST(OpsGradient, SumMeanAlongDimensions) {
  Generator gen(51);
  const Tensor x = randn({2, 3, 4, 5}, gen);
  for (bool keep : {false, true}) {
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return sum(v[0], {1}, keep); }, {x}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return mean(v[0], {-1}, keep); }, {x}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return sum(v[0], {1, 2}, keep); }, {x}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return mean(v[0], {0, 3}, keep); }, {x}));
  }
}

TEST(OpsGradient, MaxMinRouteToTheChosenElement) {
  Generator gen(53);
  // Distinct values further apart than the finite-difference step: the arg-max is stable.
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 24) * 0.1f - 1.f;
  const Tensor x = Tensor::from_vector(v, {2, 3, 4});
  for (std::int64_t d : {0, 1, -1}) {
    EXPECT_TRUE(gradcheck([&](const Vars& a) { return max(a[0], d).values; }, {x}));
    EXPECT_TRUE(gradcheck([&](const Vars& a) { return min(a[0], d, true).values; }, {x}));
  }
  // Ties: the whole gradient goes to the first.
  Variable t(Tensor::from_vector<float>({2, 2, 1}, {3}), true);
  sum(max(t, 0).values).backward();
  EXPECT_THAT(values(t.grad()), ElementsAre(1.f, 0.f, 0.f));
}

TEST(OpsErrors, ReductionsRefuseBadDimensions) {
  const Variable x(Tensor::zeros({2, 3}));
  DPL_EXPECT_ERROR(sum(x, {2}), AllOf(HasSubstr("sum"), HasSubstr("[-2, 2)"), HasSubstr("got 2")));
  DPL_EXPECT_ERROR(mean(x, {-3}), AllOf(HasSubstr("mean"), HasSubstr("got -3")));
  DPL_EXPECT_ERROR(sum(x, {1, -1}), AllOf(HasSubstr("sum"), HasSubstr("more than once")));
  DPL_EXPECT_ERROR(max(x, 5), AllOf(HasSubstr("max"), HasSubstr("(2, 3)")));
  DPL_EXPECT_ERROR(argmax(Variable(Tensor::zeros({2, 0})), 1), AllOf(HasSubstr("argmax"), HasSubstr("non-empty")));
  DPL_EXPECT_ERROR(mean(Variable(Tensor::zeros({2, 0})), {1}), AllOf(HasSubstr("mean"), HasSubstr("non-empty")));
  DPL_EXPECT_ERROR(min(Variable(Tensor::zeros({2}, kInt64)), 0), AllOf(HasSubstr("min"), HasSubstr("int64")));
}

}  // namespace
}  // namespace dpl
