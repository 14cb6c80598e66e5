// The elementwise ops, the reductions along dimensions and the losses against PyTorch:
// tests/golden/elementwise_golden.txt holds small fixed problems and PyTorch's float64 answers
// (written by tests/golden/make_elementwise_golden.py). Each case is run forward, then backward
// from sum(y * gy), and the output, the gradients and (for max and min) the indices are compared.
// Inputs are multiples of 1/64; what remains is float32 arithmetic (exp, log, pow and sums of
// up to 120 terms): 1e-5 relative and absolute, 2e-5 where a case sums.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/golden.hpp"

namespace dpl {
namespace {

using test::GoldenCase;

const std::vector<GoldenCase>& cases() {
  static const std::vector<GoldenCase> all = test::load_golden("elementwise_golden.txt");
  return all;
}

// A golden tensor of integers (labels, masks, indices) as the dtype the op takes.
template <typename T>
Tensor as_int(const Tensor& t) {
  std::vector<T> v;
  for (float f : t.to_vector<float>()) v.push_back(static_cast<T>(f));
  return Tensor::from_vector(v, t.shape());
}

// The file writes 0-d results with shape (1,): compare those by value.
void expect_matches(const Tensor& got, const Tensor& want, const std::string& what, float tol) {
  const Tensor g = got.dim() == 0 && want.shape() == Shape{1} ? got.reshape({1}) : got;
  test::expect_golden(g, want, what, tol, tol);
}

// The file numbers reductions as PyTorch's names in the order none, mean, sum: Reduction's order.
Reduction reduction_of(const GoldenCase& c) { return static_cast<Reduction>(c.int_param("reduction")); }

// Runs case c on the leaves (by the names of the file) and returns y; indices for max and min.
Variable run(const GoldenCase& c, std::map<std::string, Variable>& v, Tensor& indices) {
  const std::string& n = c.name;
  auto x = [&] { return v.at("x"); };
  if (n == "exp") return exp(x());
  if (n == "log") return log(x());
  if (n == "sqrt") return sqrt(x());
  if (n == "rsqrt") return rsqrt(x());
  if (n == "abs") return abs(x());
  if (n == "neg") return neg(x());
  // The file numbers the approximations as PyTorch's names in the order none, tanh: GeluApproximation's.
  if (n == "gelu") return gelu(x(), static_cast<GeluApproximation>(c.int_param("approximate")));
  if (n == "pow_scalar") return pow(x(), static_cast<float>(c.param("exponent")));
  if (n == "pow") return pow(v.at("a"), v.at("b"));
  if (n == "div") return div(v.at("a"), v.at("b"));
  if (n == "mul") return mul(v.at("a"), v.at("b"));
  if (n == "clamp") return clamp(x(), static_cast<float>(c.param("min")), static_cast<float>(c.param("max")));
  if (n == "clamp_min") return clamp(x(), static_cast<float>(c.param("min")), std::nullopt);
  if (n == "clamp_max") return clamp(x(), std::nullopt, static_cast<float>(c.param("max")));
  if (n == "where") return where(as_int<std::uint8_t>(c.tensor("cond")), v.at("a"), v.at("b"));
  if (n == "masked_fill")
    return masked_fill(x(), as_int<std::uint8_t>(c.tensor("mask")), static_cast<float>(c.param("value")));
  if (n == "sum" || n == "mean") {
    std::vector<std::int64_t> dims;
    if (c.params.count("dim"))
      for (double d : c.params.at("dim")) dims.push_back(static_cast<std::int64_t>(d));
    const bool keep = c.int_param("keepdim") != 0;
    return n == "sum" ? sum(x(), dims, keep) : mean(x(), dims, keep);
  }
  if (n == "max" || n == "min") {
    const ValuesIndices r = n == "max" ? max(x(), c.int_param("dim"), c.int_param("keepdim") != 0)
                                       : min(x(), c.int_param("dim"), c.int_param("keepdim") != 0);
    indices = r.indices;
    return r.values;
  }
  const Reduction red = reduction_of(c);
  if (n == "nll_loss") return nll_loss(x(), as_int<std::int64_t>(c.tensor("labels")), -100, red);
  if (n == "binary_cross_entropy") return binary_cross_entropy(x(), c.tensor("target"), red);
  if (n == "binary_cross_entropy_with_logits") return binary_cross_entropy_with_logits(x(), c.tensor("target"), red);
  if (n == "binary_cross_entropy_with_logits_pw")
    return binary_cross_entropy_with_logits(x(), c.tensor("target"), red, c.tensor("pos_weight"));
  if (n == "l1_loss") return l1_loss(x(), v.at("target"), red);
  if (n == "smooth_l1_loss") return smooth_l1_loss(x(), v.at("target"), red, static_cast<float>(c.param("beta")));
  if (n == "mse_loss") return mse_loss(x(), v.at("target"), red);
  ADD_FAILURE() << "no op for golden case " << n;
  return x();
}

TEST(ElementwiseGolden, EveryCaseMatchesPyTorch) {
  ASSERT_GE(cases().size(), 50u) << "tests/golden/elementwise_golden.txt is missing or short";
  for (std::size_t k = 0; k < cases().size(); ++k) {
    const GoldenCase& c = cases()[k];
    SCOPED_TRACE("case " + std::to_string(k) + ": " + c.name);
    const bool sums = c.name == "sum" || c.name == "mean" || c.name.find("loss") != std::string::npos ||
                      c.name.find("entropy") != std::string::npos;
    const float tol = sums ? 2e-5f : 1e-5f;
    // Leaves: every input with a gradient in the file (g<name>) is differentiable ("gy" is the
    // backward pass's weighting, not y's gradient).
    std::map<std::string, Variable> v;
    for (const auto& [name, t] : c.tensors) {
      if (name != "y" && c.tensors.count("g" + name) != 0) v[name] = Variable(t.clone(), true);
    }
    Tensor indices;
    const Variable y = run(c, v, indices);
    expect_matches(y.data(), c.tensor("y"), "y", tol);
    if (c.tensors.count("indices") != 0) {
      ASSERT_TRUE(indices.defined());
      EXPECT_EQ(indices.dtype(), kInt64);
      std::vector<float> got;
      for (std::int64_t i : indices.contiguous().to_vector<std::int64_t>()) got.push_back(static_cast<float>(i));
      test::expect_golden(Tensor::from_vector(got, indices.shape()), c.tensor("indices"), "indices", 0.f, 0.f);
    }
    sum(mul(y, Variable(y.shape().empty() ? c.tensor("gy").reshape({}) : c.tensor("gy")))).backward();
    for (auto& [name, leaf] : v) expect_matches(leaf.grad(), c.tensor("g" + name), "g" + name, tol);
  }
}

}  // namespace
}  // namespace dpl
