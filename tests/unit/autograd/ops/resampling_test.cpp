// Resampling layers of the conv/pool family: adaptive_avg_pool2d and nn::AdaptiveAvgPool2d against
// finite differences and PyTorch's values (tests/golden/resampling_golden.txt, written by
// tests/golden/make_resampling_golden.py), channels-last inputs, 16-bit inputs and bad inputs.
// Golden tolerance 1e-5: the inputs are exact, what remains is float32 sums over a window.
// PyTorch's AdaptiveAvgPool2d has an empty state_dict; its module case compares outputs only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;
using test::gradcheck;
using Vars = std::vector<Variable>;

constexpr float kPoolTol = 1e-5f;

std::vector<GoldenCase> golden_cases() {
  static const std::vector<GoldenCase> cases = test::load_golden("resampling_golden.txt");
  return cases;
}

TEST(AdaptiveAvgPool2d, Gradcheck) {
  Generator gen(1);
  const Tensor x = Tensor::normal({2, 3, 7, 5}, 0.f, 1.f, gen);
  for (const Size2d out : {Size2d(3, 2), Size2d(1), Size2d(7, 5), Size2d(9, 6)}) {
    SCOPED_TRACE(std::to_string(out.h) + "x" + std::to_string(out.w));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return adaptive_avg_pool2d(v[0], out); }, {x}));
  }
  EXPECT_TRUE(gradcheck([](const Vars& v) { return adaptive_avg_pool2d(v[0], {2, 3}); }, {x.to_channels_last()}));
}

TEST(AdaptiveAvgPool2d, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = golden_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const GoldenCase& c : cases) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(c.name + (nhwc ? " channels-last" : " nchw"));
      const Variable x(nhwc ? c.tensor("x").to_channels_last() : c.tensor("x").clone(), true);
      nn::AdaptiveAvgPool2d pool(nn::AdaptiveAvgPool2dOptions({c.int_param("output_size", 0),
                                                              c.int_param("output_size", 1)}));
      const Variable y = pool.forward(x);
      expect_golden(y.data(), c.tensor("y"), "y", kPoolTol, kPoolTol);
      sum(mul(y, Variable(c.tensor("gy")))).backward();
      EXPECT_EQ(x.grad().is_channels_last(), nhwc);
      expect_golden(x.grad(), c.tensor("gx"), "gx", kPoolTol, kPoolTol);
    }
  }
}

TEST(AdaptiveAvgPool2d, SixteenBitInputsRoundTheFloat32Result) {
  Generator gen(2);
  const Tensor x = Tensor::normal({2, 3, 9, 7}, 0.f, 1.f, gen);
  const Tensor want = adaptive_avg_pool2d(Variable(x), {4, 3}).data();
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor got = adaptive_avg_pool2d(Variable(x.to(dt)), {4, 3}).data();
    EXPECT_EQ(got.dtype(), dt);
    const float tol = dt == kBFloat16 ? 2e-2f : 2e-3f;
    expect_golden(got, want, "y", tol, tol);
  }
}

TEST(AdaptiveAvgPool2d, ModuleHasNoParametersAndKeepsItsOptions) {
  nn::AdaptiveAvgPool2d pool(nn::AdaptiveAvgPool2dOptions(7));
  EXPECT_TRUE(pool.named_parameters().empty());
  EXPECT_TRUE(pool.named_buffers().empty());
  EXPECT_EQ(pool.options().output_size().h, 7);
  EXPECT_EQ(pool.options().output_size().w, 7);
  EXPECT_EQ(pool.forward(Variable(Tensor::ones({1, 2, 14, 15}))).shape(), (Shape{1, 2, 7, 7}));
}

TEST(AdaptiveAvgPool2d, RefusesBadInputs) {
  DPL_EXPECT_ERROR(adaptive_avg_pool2d(Variable(Tensor::ones({2, 3, 4})), 2),
                   HasSubstr("adaptive_avg_pool2d: expected an input (N, C, H, W) with 4 dimensions"));
  DPL_EXPECT_ERROR(adaptive_avg_pool2d(Variable(Tensor::ones({2, 3, 0, 4})), 2),
                   HasSubstr("expected H and W of at least 1, got shape (2, 3, 0, 4)"));
  DPL_EXPECT_ERROR(adaptive_avg_pool2d(Variable(Tensor::ones({2, 3, 4, 4})), {0, 2}),
                   HasSubstr("expected an output size of at least 1x1, got 0x2"));
}

}  // namespace
}  // namespace dpl
