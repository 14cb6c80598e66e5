// conv_transpose2d and nn::ConvTranspose2d: forward and gradients against PyTorch's values
// (tests/golden/conv_transpose_golden.txt, written by tests/golden/make_conv_transpose_golden.py)
// in both memory formats, against finite differences, gradients accumulated onto earlier ones,
// 16-bit against float32, a PyTorch state_dict loaded by name
// (conv_transpose2d_module_state_dict.safetensors), the layer's initialisation and the errors for
// bad inputs.
// Golden tolerance 1e-5 + 1e-5 |want|: the inputs are exact, what remains is float32 accumulation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/gradcheck.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;
using test::gradcheck;
using Vars = std::vector<Variable>;

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = test::load_golden("conv_transpose_golden.txt");
  return cases;
}

Conv2dPair pair_of(const GoldenCase& c, const char* key) { return {c.int_param(key, 0), c.int_param(key, 1)}; }

// conv_transpose2d with golden case c's geometry.
Variable run(const GoldenCase& c, const Variable& x, const Variable& w, const Variable& b) {
  return conv_transpose2d(x, w, b, pair_of(c, "stride"), pair_of(c, "padding"), pair_of(c, "output_padding"),
                          c.int_param("groups"), pair_of(c, "dilation"));
}

std::vector<GoldenCase> op_cases() {
  std::vector<GoldenCase> out;
  for (const GoldenCase& c : golden_cases())
    if (c.params.count("stride")) out.push_back(c);
  return out;
}

TEST(ConvTranspose2d, MatchesPyTorchInBothLayouts) {
  const std::vector<GoldenCase> cases = op_cases();
  ASSERT_EQ(cases.size(), 5u) << "tests/golden/conv_transpose_golden.txt is missing or incomplete";
  for (const GoldenCase& c : cases) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(c.name + (nhwc ? " channels-last" : " nchw"));
      auto layout = [&](const Tensor& t) { return nhwc ? t.to_channels_last() : t.clone(); };
      Variable x(layout(c.tensor("x")), true), w(layout(c.tensor("w")), true), b(c.tensor("b").clone(), true);
      const Variable y = run(c, x, w, b);
      EXPECT_EQ(y.data().is_channels_last(), nhwc);
      expect_golden(y.data(), c.tensor("y"), "y");
      sum(mul(y, Variable(layout(c.tensor("gy"))))).backward();
      expect_golden(x.grad(), c.tensor("gx"), "gx");
      expect_golden(w.grad(), c.tensor("gw"), "gw");
      expect_golden(b.grad(), c.tensor("gb"), "gb");
    }
  }
}

TEST(ConvTranspose2d, Gradcheck) {
  Generator gen(5);
  for (const GoldenCase& c : op_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = test::away_from_zero(c.tensor("x").shape(), gen);
    const Tensor w = test::away_from_zero(c.tensor("w").shape(), gen);
    const Tensor b = test::away_from_zero(c.tensor("b").shape(), gen);
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return run(c, v[0], v[1], v[2]); }, {x, w, b}));
    EXPECT_TRUE(gradcheck([&](const Vars& v) { return run(c, v[0], v[1], Variable()); }, {x, w}));
  }
}

// x and w used twice: each gradient is written once, then accumulated, in both formats.
TEST(ConvTranspose2d, AccumulatesOntoEarlierGradients) {
  const GoldenCase c = op_cases()[1];
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels-last" : "nchw");
    auto layout = [&](const Tensor& t) { return nhwc ? t.to_channels_last() : t.clone(); };
    Variable x(layout(c.tensor("x")), true), w(layout(c.tensor("w")), true), b(c.tensor("b").clone(), true);
    const Variable gy(layout(c.tensor("gy")));
    sum(add(mul(run(c, x, w, b), gy), mul(run(c, x, w, b), gy))).backward();
    expect_golden(x.grad(), affine(Variable(c.tensor("gx")), 2.f, 0.f).data(), "gx");
    expect_golden(w.grad(), affine(Variable(c.tensor("gw")), 2.f, 0.f).data(), "gw");
    expect_golden(b.grad(), affine(Variable(c.tensor("gb")), 2.f, 0.f).data(), "gb");
  }
}

TEST(ConvTranspose2d, SixteenBitAgreesWithFloat32) {
  const GoldenCase c = op_cases()[3];
  const Tensor want = run(c, Variable(c.tensor("x")), Variable(c.tensor("w")), Variable(c.tensor("b"))).data();
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor got = run(c, Variable(c.tensor("x").to(dt)), Variable(c.tensor("w").to(dt)),
                           Variable(c.tensor("b").to(dt)))
                           .data();
    EXPECT_EQ(got.dtype(), dt);
    const float tol = dt == kBFloat16 ? 2e-2f : 2e-3f;
    expect_golden(got, want, "y", tol, tol);
  }
}

TEST(ConvTranspose2d, RefusesBadInputs) {
  const Variable x(Tensor::ones({2, 4, 3, 3})), w(Tensor::ones({4, 3, 3, 3}));
  DPL_EXPECT_ERROR(conv_transpose2d(Variable(Tensor::ones({4, 3, 3})), w),
                   HasSubstr("conv_transpose2d: expected an input (N, C, H, W) with 4 dimensions"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, Variable(Tensor::ones({3, 3, 3, 3}))),
                   HasSubstr("expected a weight of shape (4, out_channels/groups, kh, kw) for 4 input channels, got "
                             "(3, 3, 3, 3)"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, w, Variable(Tensor::ones({4}))), HasSubstr("expected a bias of shape (3,)"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, w, Variable(), {2, 2}, {0, 0}, {2, 0}),
                   HasSubstr("expected 0 <= output_padding < stride, got output_padding (2, 0) with stride (2, 2)"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, w, Variable(), {1, 1}, {0, 0}, {0, 0}, 3),
                   HasSubstr("expected input channels divisible by groups=3"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, w, Variable(), {1, 1}, {3, 3}),
                   HasSubstr("the output would have no rows"));
  DPL_EXPECT_ERROR(conv_transpose2d(x, w, Variable(), {0, 1}), HasSubstr("expected strides >= 1"));
}

TEST(ConvTranspose2dModule, ShapesNamesAndPyTorchsInitialisation) {
  Generator gen(7);
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(6, 8, 3).stride(2).padding(1).output_padding(1).groups(2), gen);
  const auto params = up.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(up.weight().shape(), (Shape{6, 4, 3, 3}));
  EXPECT_EQ(up.bias().shape(), (Shape{8}));
  // PyTorch's fan_in of the transposed weight: out_channels / groups * kh * kw = 4 * 9.
  const float bound = 1.f / std::sqrt(36.f);
  for (const Tensor& t : {up.weight().data(), up.bias().data()}) {
    const std::vector<float> v = t.to_vector<float>();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*lo, -bound);
    EXPECT_LE(*hi, bound);
    EXPECT_LT(*lo, -bound / 2);  // spread over the range, not a narrower one
    EXPECT_GT(*hi, bound / 2);
  }
  EXPECT_EQ(up.forward(Variable(Tensor::ones({2, 6, 5, 4}))).shape(), (Shape{2, 8, 10, 8}));
  EXPECT_EQ(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(4, 6, 1).groups(2).bias(false)).num_parameters(), 4 * 3);
  DPL_EXPECT_ERROR(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(3, 8, 3).groups(2)), HasSubstr("groups"));
  DPL_EXPECT_ERROR(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(3, 8, 3).output_padding(1)),
                   HasSubstr("expected 0 <= output_padding < stride"));
}

TEST(ConvTranspose2dModule, LoadsAPyTorchStateDictAndGivesItsOutput) {
  const GoldenCase* c = nullptr;
  for (const GoldenCase& g : golden_cases())
    if (g.name == "conv_transpose2d_module") c = &g;
  ASSERT_NE(c, nullptr);
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2));
  nn::load_weights(up, source_path("tests/golden/conv_transpose2d_module_state_dict.safetensors"));
  const Variable y = up.forward(Variable(c->tensor("x")));
  expect_golden(y.data(), c->tensor("y"), "y", 1e-5f, 1e-5f);
}

}  // namespace
}  // namespace dpl
