// conv2d and the poolings: forward against direct loops and by hand, gradients against finite
// differences (tests/support/gradcheck.hpp), channels-last against NCHW, 16-bit against float32,
// the errors for bad inputs, and the Conv2d and pooling modules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::channels_last;
using test::expect_close;
using test::is_channels_last;
using test::gradcheck;
using Vars = std::vector<Variable>;

struct Geometry {
  const char* name;
  Shape x, w;
  Conv2dPair stride, padding, dilation;
  std::int64_t groups;
};

const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> g = {
      {"plain3x3", {2, 3, 5, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {"padded", {2, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {"strided", {1, 2, 7, 6}, {3, 2, 3, 2}, {2, 3}, {1, 0}, {1, 1}, 1},
      {"dilated", {1, 2, 7, 7}, {2, 2, 3, 3}, {1, 1}, {2, 1}, {2, 3}, 1},
      {"grouped", {2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
      {"depthwise", {1, 3, 6, 5}, {3, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 3},
      {"pointwise", {2, 5, 4, 4}, {3, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
  };
  return g;
}

Tensor randn(const Shape& s, Generator& gen) { return test::away_from_zero(s, gen); }

// The definition, in double, on contiguous float32 tensors.
Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Geometry& g) {
  const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const std::int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const std::int64_t og = o / g.groups;
  const std::int64_t oh = (h + 2 * g.padding[0] - g.dilation[0] * (kh - 1) - 1) / g.stride[0] + 1;
  const std::int64_t ow = (wd + 2 * g.padding[1] - g.dilation[1] * (kw - 1) - 1) / g.stride[1] + 1;
  Tensor y = Tensor::zeros({n, o, oh, ow});
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  const float* px = xc.data<float>();
  const float* pw = wc.data<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t r = 0; r < oh; ++r)
        for (std::int64_t q = 0; q < ow; ++q) {
          double acc = b.defined() ? b.data<float>()[oc] : 0.0;
          const std::int64_t grp = oc / og;
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t u = 0; u < kh; ++u)
              for (std::int64_t v = 0; v < kw; ++v) {
                const std::int64_t hi = r * g.stride[0] - g.padding[0] + u * g.dilation[0];
                const std::int64_t wi = q * g.stride[1] - g.padding[1] + v * g.dilation[1];
                if (hi < 0 || hi >= h || wi < 0 || wi >= wd) continue;
                acc += static_cast<double>(px[((i * c + grp * cg + ci) * h + hi) * wd + wi]) *
                       pw[((oc * cg + ci) * kh + u) * kw + v];
              }
          y.data<float>()[((i * o + oc) * oh + r) * ow + q] = static_cast<float>(acc);
        }
  return y;
}

Variable run(const Geometry& g, const Variable& x, const Variable& w, const Variable& b = Variable()) {
  return conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
}

void expect_close(const Tensor& got, const Tensor& want, float atol, float rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> a = got.to(kFloat32).to_vector<float>(), e = want.to(kFloat32).to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - e[i]), atol + rtol * std::fabs(e[i])) << what << " at element " << i;
}

Tensor gaussian(const Shape& shape, Generator& gen) { return Tensor::normal(shape, 0.f, 1.f, gen); }

// Distinct values at least 0.05 apart in random order, so that no finite-difference step (at most
// 0.02 wide here) changes which element of a pooling window is the largest.
Tensor distinct(const Shape& shape, Generator& gen) {
  const std::int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.05f * static_cast<float>(i - n / 2);
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(v[static_cast<std::size_t>(i)], v[static_cast<std::size_t>(gen.below(static_cast<std::uint64_t>(i + 1)))]);
  return Tensor::from_vector(v, shape);
}

TEST(Conv2dForward, MatchesTheDefinition) {
  Generator gen(2);
  for (const auto& g : geometries()) {
    const Tensor x = randn(g.x, gen), w = randn(g.w, gen), b = randn({g.w[0]}, gen);
    expect_close(run(g, Variable(x), Variable(w), Variable(b)).data(), reference_conv(x, w, b, g), 1e-5f, 1e-5f,
                 g.name);
    expect_close(run(g, Variable(x), Variable(w)).data(), reference_conv(x, w, Tensor(), g), 1e-5f, 1e-5f, g.name);
  }
}

TEST(Conv2dGradient, EveryGeometryWithAndWithoutBias) {
  Generator gen(3);
  for (const auto& g : geometries()) {
    SCOPED_TRACE(g.name);
    const Tensor x = randn(g.x, gen), w = randn(g.w, gen), b = randn({g.w[0]}, gen);
    EXPECT_TRUE(test::gradcheck([&](const Vars& v) { return run(g, v[0], v[1], v[2]); }, {x, w, b}));
    EXPECT_TRUE(test::gradcheck([&](const Vars& v) { return run(g, v[0], v[1]); }, {x, w}));
  }
}

// Channels-last leaves: the same values and gradients as NCHW, and the output stays channels-last.
TEST(Conv2dChannelsLast, EqualsNchwForwardAndBackward) {
  Generator gen(4);
  for (const auto& g : geometries()) {
    SCOPED_TRACE(g.name);
    const Tensor x = randn(g.x, gen), w = randn(g.w, gen), b = randn({g.w[0]}, gen);
    Variable xa(x.clone(), true), wa(w.clone(), true), ba(b.clone(), true);
    Variable xb(x.to_channels_last(), true), wb(w.to_channels_last(), true), bb(b.clone(), true);
    const Variable ya = run(g, xa, wa, ba), yb = run(g, xb, wb, bb);
    EXPECT_TRUE(yb.data().is_channels_last());
    expect_close(yb.data(), ya.data(), 1e-5f, 1e-5f, "output");
    const Tensor weights = randn(ya.shape(), gen);
    sum(mul(ya, Variable(weights))).backward();
    sum(mul(yb, Variable(weights.to_channels_last()))).backward();
    expect_close(xb.grad(), xa.grad(), 1e-5f, 1e-5f, "input gradient");
    expect_close(wb.grad(), wa.grad(), 1e-5f, 1e-5f, "weight gradient");
    expect_close(bb.grad(), ba.grad(), 1e-5f, 1e-5f, "bias gradient");
  }
}

// A channels-last gradient buffer (a leaf that already has one) is written in place, and accumulates.
TEST(Conv2dChannelsLast, AccumulatesIntoChannelsLastGradients) {
  Generator gen(5);
  const Geometry& g = geometries()[4];
  const Tensor x = randn(g.x, gen).to_channels_last(), w = randn(g.w, gen).to_channels_last();
  Variable xv(x, true), wv(w, true);
  sum(run(g, xv, wv)).backward();
  const Tensor first = wv.grad().clone();
  wv.set_grad(first.to_channels_last());
  const void* buffer = wv.grad().raw_data();
  sum(run(g, xv, wv)).backward();
  EXPECT_EQ(wv.grad().raw_data(), buffer);
  EXPECT_TRUE(wv.grad().is_channels_last());
  const std::vector<float> once = first.to_vector<float>(), twice = wv.grad().to_vector<float>();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-5 * (1 + std::fabs(once[i])));
}

// bfloat16 inputs: the kernels compute in float32 and round the result once, so each output is
// float32's result on the same (rounded) inputs within one bfloat16 rounding, at most 2^-8
// relative. Tolerance: rtol 2^-7 (twice that, for float32's own summation order) plus atol 1e-2
// for outputs near zero, where cancellation leaves fewer significant bits.
TEST(Conv2dBFloat16, AgreesWithFloat32OnTheSameInputs) {
  Generator gen(6);
  for (const auto& g : geometries()) {
    SCOPED_TRACE(g.name);
    const Tensor x = randn(g.x, gen).to(kBFloat16), w = randn(g.w, gen).to(kBFloat16);
    const Tensor y16 = run(g, Variable(x), Variable(w)).data();
    const Tensor y32 = run(g, Variable(x.to(kFloat32)), Variable(w.to(kFloat32))).data();
    EXPECT_EQ(y16.dtype(), kBFloat16);
    expect_close(y16, y32, 1e-2f, 1.0f / 128.0f, "bf16 output");
    const Tensor y16cl = run(g, Variable(x.to_channels_last()), Variable(w.to_channels_last())).data();
    EXPECT_TRUE(y16cl.is_channels_last());
    expect_close(y16cl, y32, 1e-2f, 1.0f / 128.0f, "bf16 channels-last output");
  }
}

TEST(Conv2dErrors, NameWhatWasExpectedAndWhatCame) {
  const Variable x(Tensor::ones({1, 4, 5, 5})), w(Tensor::ones({2, 4, 3, 3}));
  DPL_EXPECT_ERROR(conv2d(Variable(Tensor::ones({4, 5, 5})), w), HasSubstr("expected an input (N, C, H, W) with 4"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({2, 36}))), HasSubstr("expected a weight"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({2, 3, 3, 3}))), HasSubstr("expected a weight of shape (2, 4, kh, kw)"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({3, 1, 3, 3})), Variable(), {1, 1}, {0, 0}, {1, 1}, 3), HasSubstr("expected input channels divisible by groups=3, got 4"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({3, 2, 3, 3})), Variable(), {1, 1}, {0, 0}, {1, 1}, 2), HasSubstr("expected output channels divisible by groups=2, got 3"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({2, 4, 7, 3}))), HasSubstr("the output would have no rows"));
  DPL_EXPECT_ERROR(conv2d(x, w, Variable(), {1, 1}, {0, 0}, {4, 1}), HasSubstr("the output would have no rows"));
  DPL_EXPECT_ERROR(conv2d(x, Variable(Tensor::ones({2, 4, 3, 3}, kBFloat16))), HasSubstr("expected operands of one dtype"));
  DPL_EXPECT_ERROR(conv2d(x, w, Variable(Tensor::ones({3}))), HasSubstr("expected a bias of shape (2,)"));
  DPL_EXPECT_ERROR(conv2d(x, w, Variable(), {0, 1}), HasSubstr("expected strides >= 1"));
  DPL_EXPECT_ERROR(conv2d(x, w, Variable(), {1, 1}, {-1, 0}), HasSubstr("expected paddings >= 0"));
  DPL_EXPECT_ERROR(conv2d(x, w, Variable(), {1, 1}, {0, 0}, {1, 1}, 0), HasSubstr("expected groups >= 1"));
}

// PyTorch's default initialisation: W and b uniform in +-1/sqrt(fan_in), fan_in = 3/1 * 3 * 3.
TEST(Conv2dModule, ShapesInitialisationAndForward) {
  Generator gen(7);
  nn::Conv2d conv(3, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true, gen);
  EXPECT_EQ(conv.weight().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(conv.bias().shape(), (Shape{8}));
  const float bound = 1.f / std::sqrt(27.f);
  for (const Tensor& t : {conv.weight().data(), conv.bias().data()}) {
    const std::vector<float> v = t.to_vector<float>();
    float lo = 1, hi = -1;
    for (float e : v) {
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -bound / 2);  // spread over the range, not a narrower one
    EXPECT_GT(hi, bound / 2);
  }
  const Variable y = conv(Variable(randn({2, 3, 9, 9}, gen)));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 5, 5}));
  EXPECT_EQ(nn::Conv2d(4, 6, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 2, false).num_parameters(), 6 * 2);
  DPL_EXPECT_ERROR(nn::Conv2d(3, 8, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 2), HasSubstr("groups"));
}

TEST(Conv2dModule, ToChannelsLastKeepsValuesAndGivesChannelsLastOutputs) {
  Generator gen(8);
  nn::Conv2d conv(4, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, gen);
  const Tensor x = randn({1, 4, 6, 6}, gen);
  const Tensor before = conv(Variable(x)).data();
  nn::to_channels_last(conv);
  EXPECT_TRUE(conv.weight().data().is_channels_last());
  EXPECT_EQ(conv.bias().data().dim(), 1);
  const Tensor after = conv(Variable(x.to_channels_last())).data();
  EXPECT_TRUE(after.is_channels_last());
  expect_close(after, before, 1e-5f, 1e-5f, "output");
}

TEST(Pooling, MaxPoolForwardByHand) {
  // 1x1x4x4 = 0..15, 2x2 windows, stride 2: each window's bottom-right value.
  const Tensor x = Tensor::arange(0, 16).reshape({1, 1, 4, 4});
  const Tensor y = max_pool2d(Variable(x), 2).data();
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
}

TEST(Pooling, AvgPoolPaddingCountsAsPyTorchDoes) {
  // 3x3 windows, stride 1, padding 1 on a 2x2 input of ones: the corner window holds 4 input
  // pixels of 9, so 4/9 with count_include_pad and 1 without.
  const Tensor x = Tensor::ones({1, 1, 2, 2});
  const Tensor with_pad = avg_pool2d(Variable(x), 3, 1, 1).data();
  const Tensor without = avg_pool2d(Variable(x), 3, 1, 1, false).data();
  EXPECT_EQ(with_pad.shape(), (Shape{1, 1, 2, 2}));
  for (float v : with_pad.to_vector<float>()) EXPECT_NEAR(v, 4.f / 9.f, 1e-6f);
  for (float v : without.to_vector<float>()) EXPECT_NEAR(v, 1.f, 1e-6f);
}

TEST(Pooling, GlobalAvgPoolIsTheMeanPerImageAndChannel) {
  const Tensor x = Tensor::arange(0, 24).reshape({2, 3, 2, 2});
  const Tensor y = global_avg_pool2d(Variable(x)).data();
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, 5.5f, 9.5f, 13.5f, 17.5f, 21.5f}));
}

TEST(Pooling, Gradcheck) {
  Generator gen(7);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return max_pool2d(v[0], 3, 2, 1); }, {distinct({2, 3, 7, 6}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return max_pool2d(v[0], Size2d(2, 3), Size2d(1, 2)); },
                        {distinct({1, 2, 5, 7}, gen)}));
  // Windows that stop short of the input's end (7 rows, 2x2 windows, stride 2).
  EXPECT_TRUE(gradcheck([](const Vars& v) { return max_pool2d(v[0], 2); }, {distinct({1, 2, 7, 5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return avg_pool2d(v[0], 2); }, {gaussian({1, 2, 7, 5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return avg_pool2d(v[0], 3, 2, 1); }, {gaussian({2, 3, 7, 6}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return avg_pool2d(v[0], 3, 2, 1, false); }, {gaussian({2, 3, 7, 6}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return global_avg_pool2d(v[0]); }, {gaussian({2, 3, 4, 5}, gen)}));
}

TEST(Pooling, ChannelsLastMatchesNchwAndKeepsItsFormat) {
  Generator gen(8);
  const Tensor x = distinct({2, 5, 6, 7}, gen);
  const std::vector<std::function<Variable(const Variable&)>> ops = {
      [](const Variable& v) { return max_pool2d(v, 3, 2, 1); },
      [](const Variable& v) { return avg_pool2d(v, 2, 1, 1); },
      [](const Variable& v) { return avg_pool2d(v, 3, 2, 1, false); },
  };
  for (const auto& op : ops) {
    Variable a(x.clone(), true), b(channels_last(x), true);
    const Variable ya = op(a), yb = op(b);
    EXPECT_TRUE(is_channels_last(yb.data()));
    expect_close(yb.data(), ya.data(), 1e-6f, 1e-6f);
    sum(mul(ya, Variable(ya.data().clone()))).backward();
    sum(mul(yb, Variable(ya.data().clone()))).backward();
    expect_close(b.grad(), a.grad(), 1e-6f, 1e-6f);
  }
  expect_close(global_avg_pool2d(Variable(channels_last(x))).data(), global_avg_pool2d(Variable(x)).data(), 1e-6f,
               1e-6f);
}

// The CPU computes 16-bit pooling in float32 and rounds once, so on inputs already rounded to
// the 16-bit type the results differ from float32's by that one rounding: 2^-8 relative for
// bfloat16, 2^-11 for float16.
TEST(Pooling, SixteenBitMatchesFloat32WithinOneRounding) {
  Generator gen(9);
  for (DType t : {kBFloat16, kFloat16}) {
    const float rtol = t == kBFloat16 ? 1.f / 256 : 1.f / 2048;
    const Tensor x16 = gaussian({2, 3, 6, 6}, gen).to(t);
    const Tensor x32 = x16.to(kFloat32);
    expect_close(max_pool2d(Variable(x16), 2).data(), max_pool2d(Variable(x32), 2).data(), 0.f, rtol);
    expect_close(avg_pool2d(Variable(x16), 3, 1, 1).data(), avg_pool2d(Variable(x32), 3, 1, 1).data(), 1e-6f, rtol);
    expect_close(global_avg_pool2d(Variable(x16)).data(), global_avg_pool2d(Variable(x32)).data(), 1e-6f, rtol);
  }
}

TEST(Pooling, BadInputsSayWhatWasExpected) {
  DPL_EXPECT_ERROR(max_pool2d(Variable(Tensor::ones({3, 4, 4})), 2), HasSubstr("expected an input (N, C, H, W) with 4"));
  DPL_EXPECT_ERROR(max_pool2d(Variable(Tensor::ones({1, 1, 2, 2})), 3),
                   HasSubstr("kernel 3x3 is larger than the padded input 2x2"));
  DPL_EXPECT_ERROR(avg_pool2d(Variable(Tensor::ones({1, 1, 4, 4})), 2, 1, 2),
                   HasSubstr("expected padding between 0 and half the kernel"));
  DPL_EXPECT_ERROR(max_pool2d(Variable(Tensor::zeros({1, 1, 4, 4}, TensorOptions(kInt32))), 2),
                   HasSubstr("dtype float32, bfloat16 or float16, got int32"));
}

TEST(PoolingModules, ApplyTheirWindows) {
  Generator gen(17);
  const Variable x(gaussian({2, 3, 8, 8}, gen));
  EXPECT_EQ(nn::MaxPool2d(2)(x).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(nn::AvgPool2d(3, 2, 1)(x).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(nn::GlobalAvgPool2d()(x).shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace dpl
