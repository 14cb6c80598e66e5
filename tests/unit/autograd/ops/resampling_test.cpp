// Resampling layers of the conv/pool family: adaptive_avg_pool2d and nn::AdaptiveAvgPool2d,
// interpolate and nn::Upsample against finite differences and PyTorch's values
// (tests/golden/resampling_golden.txt, written by tests/golden/make_resampling_golden.py),
// channels-last inputs, 16-bit inputs and bad inputs.
// Golden tolerance 1e-5: the inputs are exact, what remains is float32 sums over a window and
// float32 bilinear weights against PyTorch's float64 ones.
// PyTorch's AdaptiveAvgPool2d and Upsample have empty state_dicts; their module cases compare
// outputs only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>
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

// module's output for golden case c's input, NCHW and channels-last, and the input gradient of
// sum(y * gy), against PyTorch's; the gradient keeps the input's format.
void expect_module_matches(nn::Module& module, const GoldenCase& c) {
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(c.name + (nhwc ? " channels-last" : " nchw"));
    const Variable x(nhwc ? c.tensor("x").to_channels_last() : c.tensor("x").clone(), true);
    const Variable y = module.forward(x);
    expect_golden(y.data(), c.tensor("y"), "y", kPoolTol, kPoolTol);
    sum(mul(y, Variable(c.tensor("gy")))).backward();
    EXPECT_EQ(x.grad().is_channels_last(), nhwc);
    expect_golden(x.grad(), c.tensor("gx"), "gx", kPoolTol, kPoolTol);
  }
}

// The golden cases of one op: adaptive pooling's carry output_size, interpolate's a mode.
std::vector<GoldenCase> cases_with(const std::string& key) {
  std::vector<GoldenCase> out;
  for (const GoldenCase& c : golden_cases())
    if (c.params.count(key)) out.push_back(c);
  return out;
}

TEST(AdaptiveAvgPool2d, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = cases_with("output_size");
  ASSERT_EQ(cases.size(), 4u);
  for (const GoldenCase& c : cases) {
    nn::AdaptiveAvgPool2d pool(
        nn::AdaptiveAvgPool2dOptions({c.int_param("output_size", 0), c.int_param("output_size", 1)}));
    expect_module_matches(pool, c);
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

// The options of golden case c, as a user would write them.
nn::UpsampleOptions upsample_options(const GoldenCase& c) {
  nn::UpsampleOptions o;
  o.mode(c.int_param("mode") == 1 ? InterpolateMode::kBilinear : InterpolateMode::kNearest)
      .align_corners(c.int_param("align_corners") == 1);
  if (c.params.count("size")) o.size(Size2d(c.int_param("size", 0), c.int_param("size", 1)));
  else o.scale_factor(Scale2d(c.param("scale", 0), c.param("scale", 1)));
  return o;
}

TEST(Interpolate, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = cases_with("mode");
  ASSERT_EQ(cases.size(), 8u);
  for (const GoldenCase& c : cases) {
    nn::Upsample up(upsample_options(c));
    expect_module_matches(up, c);
  }
}

// x read twice: its gradient is written once, then accumulated (the kernel's beta = 1 path).
TEST(Interpolate, AccumulatesOntoEarlierGradients) {
  for (const GoldenCase& c : cases_with("mode")) {
    SCOPED_TRACE(c.name);
    nn::Upsample up(upsample_options(c));
    const Variable x(c.tensor("x").clone(), true), gy(c.tensor("gy"));
    sum(add(mul(up.forward(x), gy), mul(up.forward(x), gy))).backward();
    expect_golden(x.grad(), affine(Variable(c.tensor("gx")), 2.f, 0.f).data(), "gx", kPoolTol, kPoolTol);
  }
}

TEST(Interpolate, Gradcheck) {
  Generator gen(3);
  const Tensor x = Tensor::normal({2, 3, 4, 5}, 0.f, 1.f, gen);
  for (InterpolateMode mode : {InterpolateMode::kNearest, InterpolateMode::kBilinear})
    for (const Size2d out : {Size2d(7, 9), Size2d(8, 10), Size2d(3, 2), Size2d(4, 5), Size2d(1)}) {
      SCOPED_TRACE(std::to_string(out.h) + "x" + std::to_string(out.w));
      EXPECT_TRUE(gradcheck([&](const Vars& v) { return interpolate(v[0], out, std::nullopt, mode); }, {x}));
    }
  EXPECT_TRUE(gradcheck(
      [](const Vars& v) { return interpolate(v[0], Size2d(7, 3), std::nullopt, InterpolateMode::kBilinear, true); },
      {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return interpolate(v[0], std::nullopt, Scale2d(1.7, 2.5)); }, {x}));
  EXPECT_TRUE(gradcheck(
      [](const Vars& v) { return interpolate(v[0], std::nullopt, 1.5, InterpolateMode::kBilinear); },
      {x.to_channels_last()}));
}

TEST(Interpolate, NearestCopiesPixelsAndKeepsNonFiniteValuesApart) {
  // 4x4 -> 8x8 by the doubling shortcut: every output pixel is its source pixel, bit for bit, and
  // an Inf does not spread into its neighbours' copies.
  Tensor x = Tensor::arange(0, 16).reshape({1, 1, 4, 4}).clone();
  x.data<float>()[5] = std::numeric_limits<float>::infinity();
  const Tensor y = interpolate(Variable(x), std::nullopt, 2.0).data();
  ASSERT_EQ(y.shape(), (Shape{1, 1, 8, 8}));
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t j = 0; j < 8; ++j) EXPECT_EQ(y.data<float>()[i * 8 + j], x.data<float>()[(i / 2) * 4 + j / 2]);
}

TEST(Interpolate, SixteenBitInputsRoundTheFloat32Result) {
  Generator gen(4);
  const Tensor x = Tensor::normal({2, 3, 5, 6}, 0.f, 1.f, gen);
  for (InterpolateMode mode : {InterpolateMode::kNearest, InterpolateMode::kBilinear}) {
    const Tensor want = interpolate(Variable(x), Size2d(9, 11), std::nullopt, mode).data();
    for (DType dt : {kBFloat16, kFloat16}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor got = interpolate(Variable(x.to(dt)), Size2d(9, 11), std::nullopt, mode).data();
      EXPECT_EQ(got.dtype(), dt);
      const float tol = dt == kBFloat16 ? 2e-2f : 2e-3f;
      expect_golden(got, want, "y", tol, tol);
    }
  }
}

TEST(Upsample, ModuleHasNoParametersAndKeepsItsOptions) {
  nn::Upsample up(nn::UpsampleOptions().scale_factor(2.0).mode(InterpolateMode::kBilinear).align_corners(true));
  EXPECT_TRUE(up.named_parameters().empty());
  EXPECT_TRUE(up.named_buffers().empty());
  EXPECT_FALSE(up.options().size().has_value());
  EXPECT_EQ(up.options().scale_factor()->h, 2.0);
  EXPECT_EQ(up.options().mode(), InterpolateMode::kBilinear);
  EXPECT_TRUE(up.options().align_corners());
  EXPECT_EQ(up.forward(Variable(Tensor::ones({1, 2, 5, 3}))).shape(), (Shape{1, 2, 10, 6}));
  EXPECT_EQ(nn::Upsample(nn::UpsampleOptions().size(4)).forward(Variable(Tensor::ones({1, 2, 5, 3}))).shape(),
            (Shape{1, 2, 4, 4}));
}

TEST(Interpolate, RefusesBadInputs) {
  const Variable x(Tensor::ones({2, 3, 4, 4}));
  DPL_EXPECT_ERROR(interpolate(Variable(Tensor::ones({2, 3, 4})), 8),
                   HasSubstr("interpolate: expected an input (N, C, H, W) with 4 dimensions"));
  DPL_EXPECT_ERROR(interpolate(Variable(Tensor::ones({2, 3, 0, 4})), 8),
                   HasSubstr("expected H and W of at least 1, got shape (2, 3, 0, 4)"));
  DPL_EXPECT_ERROR(interpolate(x, 8, 2.0), HasSubstr("expected exactly one of size and scale_factor, got both"));
  DPL_EXPECT_ERROR(interpolate(x, std::nullopt), HasSubstr("expected exactly one of size and scale_factor, got neither"));
  DPL_EXPECT_ERROR(interpolate(x, Size2d(0, 3)), HasSubstr("expected an output size of at least 1x1, got 0x3"));
  DPL_EXPECT_ERROR(interpolate(x, std::nullopt, -2.0), HasSubstr("expected positive finite scale factors, got -2x-2"));
  DPL_EXPECT_ERROR(interpolate(x, std::nullopt, 0.1),
                   HasSubstr("scale factors 0.1x0.1 give input (2, 3, 4, 4) an empty output (0x0)"));
  DPL_EXPECT_ERROR(interpolate(x, 8, std::nullopt, InterpolateMode::kNearest, true),
                   HasSubstr("align_corners requires the bilinear mode"));
  DPL_EXPECT_ERROR(nn::Upsample().forward(x), HasSubstr("got neither"));
}

}  // namespace
}  // namespace dpl
