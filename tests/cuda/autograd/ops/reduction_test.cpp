// CPU-vs-CUDA agreement of the reductions (op_agreement.hpp): sum, mean, softmax, log_softmax.
//
// Tolerances: rtol 1e-5 / atol 1e-5 for elementwise ops and reductions, atol 1e-4 where a
// matrix product with inner extent up to 16 is involved.
#include "op_agreement.hpp"

namespace dpl::test {
namespace {

TEST_F(AutogradTest, SumAndMean) {
  check("sum", {{10, 10}}, [](const auto& x) { return sum(x[0]); });
  check("mean", {{33, 7}}, [](const auto& x) { return mean(x[0]); });
  check("mean of a large tensor", {{1000, 1000}}, [](const auto& x) { return mean(x[0]); }, 1e-5f, 1e-6f);
}

TEST_F(AutogradTest, SoftmaxAndLogSoftmax) {
  for (const Shape& s : {Shape{9}, Shape{6, 10}, Shape{2, 3, 300}}) {
    check("softmax", {s}, [](const auto& x) { return softmax(x[0]); });
    check("log_softmax", {s}, [](const auto& x) { return log_softmax(x[0]); });
  }
  const Tensor logits = rand({4, 3, 17});
  EXPECT_EQ(argmax(Variable(on_gpu(logits))).to(Device::cpu()).to_vector<std::int64_t>(),
            argmax(Variable(logits)).to_vector<std::int64_t>());
}

}  // namespace
}  // namespace dpl::test
