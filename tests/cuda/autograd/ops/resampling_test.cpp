// CPU-vs-CUDA agreement of the resampling ops of the conv/pool family (op_agreement.hpp):
// adaptive_avg_pool2d for float32, and for bfloat16 and float16 against the CPU's 16-bit result.
//
// Tolerances: rtol/atol 1e-5 for float32 (window sums of at most a few dozen terms, in another
// order on each device: the GPU's backward gathers where the CPU's scatters); one 16-bit rounding
// (2^-7 bfloat16, 2^-10 float16 relative) for 16-bit.
#include <string>

#include "op_agreement.hpp"

namespace dpl::test {
namespace {

// Overlapping windows, the identity, outputs larger than the input, the global mean.
const struct {
  Shape x;
  Size2d out;
} kCases[] = {{{2, 3, 7, 5}, {3, 2}}, {{1, 4, 6, 6}, {6, 6}}, {{2, 2, 3, 4}, {5, 9}}, {{3, 5, 8, 8}, {1, 1}},
              {{2, 16, 32, 32}, {7, 7}}};

TEST_F(AutogradTest, AdaptiveAvgPool2dAgrees) {
  for (const auto& c : kCases) {
    const Size2d out = c.out;
    check("adaptive_avg_pool2d " + shape_str(c.x), {c.x}, [out](const auto& x) { return adaptive_avg_pool2d(x[0], out); });
  }
}

TEST_F(AutogradTest, AdaptiveAvgPool2dAgreesInSixteenBits) {
  for (DType t : {kBFloat16, kFloat16})
    for (const auto& c : kCases) {
      SCOPED_TRACE(shape_str(c.x) + " " + dtype_name(t));
      const Tensor x = rand(c.x).to(t);
      Variable xc(x.clone(), true), xg(on_gpu(x), true);
      const Variable yc = adaptive_avg_pool2d(xc, c.out), yg = adaptive_avg_pool2d(xg, c.out);
      const float tol = t == kBFloat16 ? 1.f / 64 : 1.f / 512;
      expect_close(yg.data().to(Device::cpu()), yc.data(), tol, tol, "forward");
      const Tensor gy = rand(yc.shape()).to(t);
      sum(mul(yc, Variable(gy))).backward();
      sum(mul(yg, Variable(on_gpu(gy)))).backward();
      expect_close(xg.grad().to(Device::cpu()), xc.grad(), tol, tol, "grad of the input");
    }
}

}  // namespace
}  // namespace dpl::test
