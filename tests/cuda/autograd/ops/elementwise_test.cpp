// CPU-vs-CUDA agreement of the elementwise ops (op_agreement.hpp): add, sub and mul with every
// broadcast, relu and the other activations, dropout's mask, scalar arithmetic.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include <cmath>

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

}  // namespace
}  // namespace dpl::test
