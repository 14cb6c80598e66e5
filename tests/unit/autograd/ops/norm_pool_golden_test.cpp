// Batch norm and pooling against PyTorch: tests/golden/norm_pool_golden.txt holds small fixed
// problems and PyTorch's float64 answers (written by tests/golden/make_norm_pool_golden.py), in
// NCHW and channels-last. Inputs are multiples of 1/64; what remains is float32 arithmetic:
// 1e-5 for pooling, 1e-4 for batch norm (a variance, a square root and sums over the batch).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/golden.hpp"

namespace dpl {
namespace {

using test::expect_golden;
using test::GoldenCase;

constexpr float kNormTol = 1e-4f;

const GoldenCase& golden(const std::string& name) {
  static const std::vector<GoldenCase> cases = test::load_golden("norm_pool_golden.txt");
  for (const GoldenCase& c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "tests/golden/norm_pool_golden.txt has no case " << name;
  static const GoldenCase none;
  return none;
}

Tensor in_layout(const Tensor& t, bool nhwc) { return nhwc ? t.to_channels_last() : t.clone(); }

// k training steps through one BatchNorm2d: the running statistics after them, and the last
// step's output and gradients.
void check_batch_norm_training(const std::string& name) {
  const GoldenCase& c = golden(name);
  ASSERT_FALSE(c.tensors.empty());
  const std::int64_t steps = c.int_param("steps");
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(name + (nhwc ? " channels-last" : " nchw"));
    nn::BatchNorm2d bn(c.tensor("w").size(0), c.param("eps"), c.param("momentum"));
    Tensor weight = bn.weight().data(), bias = bn.bias().data();  // views of the module's parameters
    weight.copy_(c.tensor("w"));
    bias.copy_(c.tensor("b"));
    for (std::int64_t k = 0; k < steps; ++k) {
      Variable x(in_layout(c.tensor("x" + std::to_string(k)), nhwc), true);
      const Variable y = bn(x);
      if (k + 1 < steps) continue;
      expect_golden(y.data(), c.tensor("y"), "y", kNormTol, kNormTol);
      sum(mul(y, Variable(in_layout(c.tensor("gy"), nhwc)))).backward();
      expect_golden(x.grad(), c.tensor("gx"), "gx", kNormTol, kNormTol);
      expect_golden(bn.weight().grad(), c.tensor("gw"), "gw", kNormTol, kNormTol);
      expect_golden(bn.bias().grad(), c.tensor("gb"), "gb", kNormTol, kNormTol);
    }
    expect_golden(bn.running_mean(), c.tensor("running_mean"), "running_mean", kNormTol, kNormTol);
    expect_golden(bn.running_var(), c.tensor("running_var"), "running_var", kNormTol, kNormTol);
  }
}

TEST(NormPoolGolden, BatchNormTrainingAndRunningStatisticsAfterKSteps) {
  check_batch_norm_training("batch_norm_train");
  check_batch_norm_training("batch_norm_train_momentum");
}

TEST(NormPoolGolden, BatchNormEvaluationUsesTheRunningStatistics) {
  const GoldenCase& c = golden("batch_norm_eval");
  ASSERT_FALSE(c.tensors.empty());
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels-last" : "nchw");
    NoGradGuard no_grad;
    const Variable y = batch_norm(Variable(in_layout(c.tensor("x"), nhwc)), Variable(c.tensor("w")),
                                  Variable(c.tensor("b")), c.tensor("running_mean").clone(),
                                  c.tensor("running_var").clone(), /*training=*/false, 0.1, c.param("eps"));
    expect_golden(y.data(), c.tensor("y"), "y", kNormTol, kNormTol);
  }
}

TEST(NormPoolGolden, PoolingForwardAndBackward) {
  for (const char* name : {"max_pool", "avg_pool", "avg_pool_exclude_pad", "global_avg_pool"}) {
    const GoldenCase& c = golden(name);
    ASSERT_FALSE(c.tensors.empty());
    const Size2d kernel(c.int_param("kernel", 0), c.int_param("kernel", 1));
    const Size2d stride(c.int_param("stride", 0), c.int_param("stride", 1));
    const Size2d padding(c.int_param("padding", 0), c.int_param("padding", 1));
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(std::string(name) + (nhwc ? " channels-last" : " nchw"));
      Variable x(in_layout(c.tensor("x"), nhwc), true);
      Variable y;
      switch (c.int_param("kind")) {
        case 0: y = max_pool2d(x, kernel, stride, padding); break;
        case 1: y = avg_pool2d(x, kernel, stride, padding, c.int_param("include_pad") != 0); break;
        default: y = global_avg_pool2d(x); break;
      }
      expect_golden(y.data(), c.tensor("y"), "y");
      const Tensor gy = c.tensor("gy");
      sum(mul(y, Variable(gy.dim() == 4 ? in_layout(gy, nhwc) : gy))).backward();
      expect_golden(x.grad(), c.tensor("gx"), "gx");
    }
  }
}

}  // namespace
}  // namespace dpl
