// CPU-vs-CUDA agreement of the elementwise ops (op_agreement.hpp): add, sub and mul with every
// broadcast, relu and the other activations, dropout's mask, scalar arithmetic; and in float32,
// bfloat16 and float16 (dtype_agreement.hpp): exp, log, sqrt, rsqrt, abs, pow, clamp, div and pow
// with PyTorch's broadcasting, where and masked_fill.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <cmath>

#include "dtype_agreement.hpp"
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, AddSubMulEveryBroadcast) {
  const std::vector<std::pair<std::string, Shape>> seconds = {
      {"same shape", {6, 8}}, {"row", {8}}, {"one element", {1}}, {"scalar", {}}};
  for (const auto& [what, bs] : seconds) {
    check("add " + what, {{6, 8}, bs}, [](const auto& x) { return add(x[0], x[1]); });
    check("sub " + what, {{6, 8}, bs}, [](const auto& x) { return sub(x[0], x[1]); });
    check("mul " + what, {{6, 8}, bs}, [](const auto& x) { return mul(x[0], x[1]); });
  }
  check("operators", {{4, 5}, {4, 5}, {5}}, [](const auto& x) { return (x[0] + x[1]) * x[2] - x[1]; });
}

TEST_F(AutogradTest, Relu) {
  check("relu", {{7, 9}}, [](const auto& x) { return relu(x[0]); });
  check("relu vectorised", {{16, 64}}, [](const auto& x) { return relu(x[0]); });
}

TEST_F(AutogradTest, Activations) {
  for (const Shape& s : {Shape{7, 9}, Shape{2, 3, 4, 5}}) {
    check("leaky_relu", {s}, [](const auto& x) { return leaky_relu(x[0], 0.2f); });
    check("sigmoid", {s}, [](const auto& x) { return sigmoid(x[0]); });
    check("tanh", {s}, [](const auto& x) { return tanh(x[0]); });
    check("gelu", {s}, [](const auto& x) { return gelu(x[0]); });
    check("gelu tanh", {s}, [](const auto& x) { return gelu(x[0], GeluApproximation::kTanh); });
  }
}

TEST_F(AutogradTest, DropoutDrawsTheSameMaskOnBothDevices) {
  check("dropout", {{3, 4, 50}}, [](const auto& x) {
    Generator g(11);  // one state per call: both devices see the same seed
    return dropout(x[0], 0.4f, g);
  });
}

TEST_F(AutogradTest, ScalarArithmetic) {
  check("scalar arithmetic", {{4, 6}}, [](const auto& x) { return 1.f - (x[0] * 3.f + 2.f) / 4.f; });
}

using ElementwiseDtypes = DtypeAgreementTest;

TEST_F(ElementwiseDtypes, UnaryMath) {
  for (const Shape& s : {Shape{7, 9}, Shape{2, 3, 4, 5}}) {
    check_dtypes("exp", {s}, [](const auto& x) { return exp(x[0]); });
    check_dtypes("abs", {s}, [](const auto& x) { return abs(x[0]); });
    check_dtypes("neg", {s}, [](const auto& x) { return neg(x[0]); });
    check_dtypes("pow 3", {s}, [](const auto& x) { return pow(x[0], 3.f); });
    check_dtypes("pow 2", {s}, [](const auto& x) { return pow(x[0], 2.f); });
    check_dtypes("pow 1", {s}, [](const auto& x) { return pow(x[0], 1.f); });
    check_dtypes(
        "pow 0.5", {s}, [](const auto& x) { return pow(x[0], 0.5f); }, 0.25f, 2.f);
    check_dtypes(
        "pow -1", {s}, [](const auto& x) { return pow(x[0], -1.f); }, 0.25f, 2.f);
    check_dtypes("clamp", {s}, [](const auto& x) { return clamp(x[0], -0.5f, 0.25f); });
    check_dtypes("clamp bounds crossed", {s}, [](const auto& x) { return clamp(x[0], 0.25f, -0.5f); });
    check_dtypes("clamp min", {s}, [](const auto& x) { return clamp(x[0], 0.1f, std::nullopt); });
    check_dtypes("clamp max", {s}, [](const auto& x) { return clamp(x[0], std::nullopt, -0.1f); });
    check_dtypes(
        "log", {s}, [](const auto& x) { return log(x[0]); }, 0.25f, 2.f);
    check_dtypes(
        "sqrt", {s}, [](const auto& x) { return sqrt(x[0]); }, 0.25f, 2.f);
    check_dtypes(
        "rsqrt", {s}, [](const auto& x) { return rsqrt(x[0]); }, 0.25f, 2.f);
    check_dtypes(
        "pow 1.5", {s}, [](const auto& x) { return pow(x[0], 1.5f); }, 0.25f, 2.f);
  }
}

TEST_F(ElementwiseDtypes, BinaryOpsWithPyTorchBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{6, 8}, {6, 8}}, {{2, 3, 4}, {3, 1}}, {{4, 1}, {1, 5}}, {{3, 1, 5}, {2, 1, 4, 1}}, {{6, 8}, {8}}};
  for (const auto& [sa, sb] : pairs) {
    const std::string shapes = shape_str(sa) + " and " + shape_str(sb);
    check_dtypes(
        "div " + shapes, {sa, sb}, [](const auto& x) { return div(x[0], x[1]); }, 0.5f, 2.f);
    check_dtypes(
        "pow " + shapes, {sa, sb}, [](const auto& x) { return pow(x[0], x[1]); }, 0.5f, 2.f);
    check_dtypes("add " + shapes, {sa, sb}, [](const auto& x) { return add(x[0], x[1]); });
    check_dtypes("sub " + shapes, {sa, sb}, [](const auto& x) { return sub(x[0], x[1]); });
    check_dtypes("mul " + shapes, {sa, sb}, [](const auto& x) { return mul(x[0], x[1]); });
  }
}

TEST_F(ElementwiseDtypes, WhereAndMaskedFill) {
  std::vector<std::uint8_t> bits(12);
  for (auto& b : bits) b = static_cast<std::uint8_t>(gen_.below(2));
  const Tensor cond = Tensor::from_vector(bits, {3, 1, 4});
  check_dtypes("where", {{2, 3, 5, 4}, {5, 1}}, [&](const auto& x) { return where(beside(cond, x[0]), x[0], x[1]); });
  const Tensor mask = Tensor::from_vector(std::vector<std::uint8_t>(bits.begin(), bits.begin() + 4), {4});
  check_dtypes("masked_fill", {{3, 5, 4}}, [&](const auto& x) { return masked_fill(x[0], beside(mask, x[0]), -2.f); });
}

TEST_F(ElementwiseDtypes, WhereMaskedFillAndDivBroadcastOverLeadingDimensions) {
  // A causal mask (1, 1, T, T) over (B, H, T, T) as attention fills it, a condition of the
  // operands' shape, and a division by a row: the GPU's periodic paths, vectorised.
  std::vector<std::uint8_t> causal(16 * 16);
  for (std::size_t i = 0; i < 16; ++i)
    for (std::size_t j = 0; j < 16; ++j) causal[i * 16 + j] = j > i ? 1 : 0;
  const Tensor mask = Tensor::from_vector(causal, {1, 1, 16, 16});
  check_dtypes("masked_fill causal", {{2, 3, 16, 16}},
               [&](const auto& x) { return masked_fill(x[0], beside(mask, x[0]), -1e4f); });
  std::vector<std::uint8_t> bits(4 * 24);
  for (auto& b : bits) b = static_cast<std::uint8_t>(gen_.below(2));
  const Tensor cond = Tensor::from_vector(bits, {4, 24});
  check_dtypes("where same shape", {{4, 24}, {4, 24}},
               [&](const auto& x) { return where(beside(cond, x[0]), x[0], x[1]); });
  check_dtypes(
      "div row", {{2, 4, 24}, {24}}, [](const auto& x) { return div(x[0], x[1]); }, 0.5f, 2.f);
}

}  // namespace
}  // namespace dpl::test
