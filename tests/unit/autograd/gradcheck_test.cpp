// The finite-difference harness (tests/support/gradcheck.hpp) itself: it must reject wrong,
// overwriting and missing gradients, so that a passing op test means something.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using test::gradcheck;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

// y = x whose backward claims dy/dx = 2: a gradcheck that accepted it would accept anything.
class WrongGradNode final : public Node {
 public:
  const char* name() const override { return "wrong_grad"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const float* g = gy.data<float>();
    float* out = t[0].tensor->data<float>();
    // beta 0 means the buffer holds garbage (possibly NaN), so it is overwritten, never scaled.
    for (std::int64_t i = 0; i < gy.numel(); ++i) out[i] = (t[0].beta == 0.f ? 0.f : t[0].beta * out[i]) + 2.f * g[i];
  }
};

Variable wrong_grad_identity(const Variable& x) {
  Tensor out = x.data().clone();
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<WrongGradNode>();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

TEST(Gradcheck, RejectsAWrongGradient) {
  Generator gen(1);
  const auto result = gradcheck([](const Vars& v) { return wrong_grad_identity(v[0]); }, {randn({3, 2}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("6 of 6 gradient elements disagree"));
}

// y = x with the right gradient, written without honouring beta: it overwrites earlier
// contributions instead of adding to them.
class OverwritingNode final : public Node {
 public:
  const char* name() const override { return "overwriting"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) t[0].tensor->copy_(gy);
  }
};

TEST(Gradcheck, RejectsABackwardThatIgnoresAccumulation) {
  Generator gen(3);
  const auto f = [](const Vars& v) {
    Tensor out = v[0].data().clone();
    if (!any_requires_grad({&v[0]})) return Variable(out);
    auto node = std::make_shared<OverwritingNode>();
    node->set_inputs({v[0]});
    return Variable::make_result(out, node);
  };
  const auto result = gradcheck(f, {randn({4}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("accumulating into an existing gradient"));
}

TEST(Gradcheck, RejectsAllZeroInputs) {
  const auto result = gradcheck([](const Vars& v) { return relu(v[0]); }, {Tensor::zeros({3})});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("all zeros"));
}

TEST(Gradcheck, RejectsAnInputThatReceivedNoGradient) {
  // The second input is never used, so backward leaves its gradient undefined.
  Generator gen(2);
  const auto result =
      gradcheck([](const Vars& v) { return mul(v[0], v[0]); }, {randn({2, 2}, gen), randn({2, 2}, gen)});
  EXPECT_FALSE(result);
  EXPECT_THAT(std::string(result.message()), ::testing::HasSubstr("input 1 received no gradient"));
}

}  // namespace
}  // namespace dpl
