// CPU-vs-CUDA agreement of matmul and linear (op_agreement.hpp), and of a small MLP end to end.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, Matmul) {
  check("matmul", {{5, 7}, {7, 3}}, [](const auto& x) { return matmul(x[0], x[1]); }, 1e-5f, 1e-4f);
  // The same variable twice: the engine writes one gradient to scratch and adds it.
  check("matmul(a, a)", {{6, 6}}, [](const auto& x) { return matmul(x[0], x[0]); }, 1e-5f, 1e-4f);
}

TEST_F(AutogradTest, Linear) {
  check("linear with bias", {{6, 16}, {4, 16}, {4}}, [](const auto& x) { return linear(x[0], x[1], x[2]); },
        1e-5f, 1e-4f);
  check("linear without bias", {{6, 16}, {5, 16}}, [](const auto& x) { return linear(x[0], x[1]); }, 1e-5f, 1e-4f);
}

TEST_F(AutogradTest, MlpForwardBackward) {
  // A whole model: parameters in arenas, gradients accumulated into the gradient arena.
  Generator g1(seed_), g2(seed_);
  nn::MLP mc(32, 20, 5, g1), mg(32, 20, 5, g2);
  mg.to(gpu());
  mc.zero_grad();
  mg.zero_grad();
  const Tensor x = rand({16, 20});
  const Tensor y = labels(16, 5);
  const Variable lc = softmax_cross_entropy(mc(Variable(x)), y);
  const Variable lg = softmax_cross_entropy(mg(Variable(on_gpu(x))), on_gpu(y));
  expect_close(lg.data(), lc.data(), 1e-5f, 1e-6f, "MLP loss");
  lc.backward();
  lg.backward();
  expect_close(mg.arena().grads(), mc.arena().grads(), 1e-4f, 1e-6f, "MLP gradient arena");
}

}  // namespace
}  // namespace dpl::test
