// Reductions (sum, mean, softmax, log_softmax, argmax): forward values, gradients against finite
// differences, and channels-last inputs (tests/support/memory_formats.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using test::gradcheck;
using test::expect_same_values;
using test::FormatRun;
using test::is_nhwc;
using test::run_both;

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

}  // namespace
}  // namespace dpl
