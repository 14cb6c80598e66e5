// Channels-last through autograd: elementwise ops keep their input's memory format, gradient
// buffers take their variable's format, and every result equals the contiguous computation,
// including when operands come in two formats or the graph reshapes a channels-last tensor.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "dpl/dpl.hpp"

namespace dpl {
namespace {

bool is_nhwc(const Tensor& t) { return t.is_channels_last() && !t.is_contiguous(); }

// The logical values of t (independent of its memory format).
std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

void expect_same_values(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<float> va = values(a), vb = values(b);
  for (std::size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], 1e-5f) << what << " at " << i;
}

using Graph = std::function<Variable(const Variable&, const Variable&)>;

// Runs graph on (x, y) given contiguous and given channels-last; the outputs and both inputs'
// gradients must agree. Returns the channels-last run's output and gradients for format checks.
struct FormatRun {
  Variable out, x, y;
};
FormatRun run_both(const Graph& graph, bool y_channels_last = true) {
  Generator gen(7);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  const Tensor y = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  Variable xc(x.clone(), true), yc(y.clone(), true);
  Variable out_c = graph(xc, yc);
  sum(out_c).backward();
  Variable xl(x.to_channels_last(), true), yl(y_channels_last ? y.to_channels_last() : y.clone(), true);
  Variable out_l = graph(xl, yl);
  expect_same_values(out_l.data(), out_c.data(), "output");
  sum(out_l).backward();
  expect_same_values(xl.grad(), xc.grad(), "gradient of x");
  expect_same_values(yl.grad(), yc.grad(), "gradient of y");
  return {out_l, xl, yl};
}

TEST(MemoryFormat, ElementwiseOpsKeepChannelsLastWithoutCopies) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) {
    return tanh(sigmoid(gelu(leaky_relu(relu(x * y + x) * 2.f - y, 0.1f))));
  });
  EXPECT_TRUE(is_nhwc(r.out.data()));
  EXPECT_TRUE(is_nhwc(r.x.grad()));
  EXPECT_TRUE(is_nhwc(r.y.grad()));
}

TEST(MemoryFormat, OperandsInTwoFormatsGiveTheSameResultAndGradients) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) { return x * y - y; }, /*y_channels_last=*/false);
  EXPECT_TRUE(is_nhwc(r.out.data()));  // the first operand's format
  EXPECT_TRUE(is_nhwc(r.x.grad()));
  EXPECT_TRUE(r.y.grad().is_contiguous());  // each gradient in its variable's format
}

TEST(MemoryFormat, ReshapeAndRowBroadcastOfAChannelsLastTensor) {
  Generator gen(8);
  const Tensor bias = Tensor::uniform({5}, -1.f, 1.f, gen);
  const Tensor row = Tensor::uniform({60}, -1.f, 1.f, gen);
  run_both([&](const Variable& x, const Variable& y) {
    return add(flatten(x * y, 1), Variable(row)) +
           flatten(add(x, Variable(bias)), 1);  // (2, 3, 4, 5) + (5,): broadcast over rows
  });
}

TEST(MemoryFormat, ReductionsDropoutAndMseAcceptChannelsLast) {
  const FormatRun r = run_both([](const Variable& x, const Variable& y) {
    Generator g(3);
    return add(mse_loss(x, y), mean(dropout(x, 0.f, g, true)) + sum(x * y));
  });
  EXPECT_TRUE(is_nhwc(r.x.grad()));
}

TEST(MemoryFormat, DtypeConversionKeepsChannelsLast) {
  Generator gen(10);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  const Tensor half = x.to_channels_last().to(kBFloat16);
  EXPECT_TRUE(is_nhwc(half));
  expect_same_values(half.to(kFloat32), x.to(kBFloat16).to(kFloat32), "bfloat16 values");
  EXPECT_TRUE(is_nhwc(half.to(kFloat32)));
}

TEST(MemoryFormat, DropoutGradientFollowsTheForwardMask) {
  Generator gen(9);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, 0.5f, 1.f, gen).to_channels_last();
  Variable xl(x, true);
  Generator drop(11);
  Variable out = dropout(xl, 0.5f, drop, true);
  EXPECT_TRUE(is_nhwc(out.data()));
  sum(out).backward();
  // Where the output kept an element (scaled by 2), the gradient is 2; where it dropped it, 0.
  const std::vector<float> o = values(out.data()), g = values(xl.grad());
  int kept = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    EXPECT_FLOAT_EQ(g[i], o[i] != 0.f ? 2.f : 0.f) << i;
    kept += o[i] != 0.f;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<int>(o.size()));
}

}  // namespace
}  // namespace dpl
