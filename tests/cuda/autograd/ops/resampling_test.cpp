// CPU-vs-CUDA agreement of the resampling ops of the conv/pool family (op_agreement.hpp):
// adaptive_avg_pool2d and interpolate for float32, and for bfloat16 and float16 against the CPU's
// 16-bit result.
//
// Tolerances: rtol/atol 1e-5 for float32 (window sums of at most a few dozen terms, in another
// order on each device: the GPU's adaptive backward gathers where the CPU's scatters); one 16-bit
// rounding (2^-7 bfloat16, 2^-10 float16 relative) for 16-bit.
#include <optional>
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

// op on the 16-bit x (a CPU tensor) on the CPU and on the GPU, with the output gradient gy_of(y's
// shape): forward and input gradient agree within one 16-bit rounding.
template <typename Op, typename Rand>
void check_sixteen_bits(const Tensor& x, const Op& op, const Rand& gy_of) {
  SCOPED_TRACE(shape_str(x.shape()) + " " + dtype_name(x.dtype()));
  Variable xc(x.clone(), true), xg(on_gpu(x), true);
  const Variable yc = op(xc), yg = op(xg);
  const float tol = x.dtype() == kBFloat16 ? 1.f / 64 : 1.f / 512;
  expect_close(yg.data().to(Device::cpu()), yc.data(), tol, tol, "forward");
  const Tensor gy = gy_of(yc.shape()).to(x.dtype());
  sum(mul(yc, Variable(gy))).backward();
  sum(mul(yg, Variable(on_gpu(gy)))).backward();
  expect_close(xg.grad().to(Device::cpu()), xc.grad(), tol, tol, "grad of the input");
}

TEST_F(AutogradTest, AdaptiveAvgPool2dAgreesInSixteenBits) {
  for (DType t : {kBFloat16, kFloat16})
    for (const auto& c : kCases) {
      const Size2d out = c.out;
      check_sixteen_bits(
          rand(c.x).to(t), [out](const Variable& x) { return adaptive_avg_pool2d(x, out); },
          [this](const Shape& s) { return rand(s); });
    }
}

// Enlarging and shrinking, PyTorch's doubling shortcut, a scale factor whose step is not in / out,
// align_corners, and a ResNet-sized decoder step.
struct InterpolateCase {
  Shape x;
  std::optional<Size2d> size;
  std::optional<Scale2d> scale;
  InterpolateMode mode;
  bool align_corners;
};
const InterpolateCase kInterpolateCases[] = {
    {{2, 3, 5, 4}, Size2d(7, 9), std::nullopt, InterpolateMode::kNearest, false},
    {{1, 4, 6, 6}, std::nullopt, Scale2d(2.0), InterpolateMode::kNearest, false},
    {{2, 2, 4, 5}, std::nullopt, Scale2d(1.5), InterpolateMode::kNearest, false},
    {{2, 2, 9, 7}, Size2d(4, 3), std::nullopt, InterpolateMode::kNearest, false},
    {{2, 3, 5, 4}, Size2d(7, 9), std::nullopt, InterpolateMode::kBilinear, false},
    {{2, 3, 5, 4}, Size2d(7, 9), std::nullopt, InterpolateMode::kBilinear, true},
    {{2, 2, 4, 5}, std::nullopt, Scale2d(2.5, 1.5), InterpolateMode::kBilinear, false},
    {{2, 2, 9, 7}, Size2d(4, 3), std::nullopt, InterpolateMode::kBilinear, false},
    {{2, 16, 28, 28}, std::nullopt, Scale2d(2.0), InterpolateMode::kBilinear, false},
};

TEST_F(AutogradTest, InterpolateAgrees) {
  for (const InterpolateCase& c : kInterpolateCases)
    check("interpolate " + shape_str(c.x), {c.x},
          [c](const auto& x) { return interpolate(x[0], c.size, c.scale, c.mode, c.align_corners); });
}

TEST_F(AutogradTest, InterpolateAgreesInSixteenBits) {
  for (DType t : {kBFloat16, kFloat16})
    for (const InterpolateCase& c : kInterpolateCases)
      check_sixteen_bits(
          rand(c.x).to(t), [c](const Variable& x) { return interpolate(x, c.size, c.scale, c.mode, c.align_corners); },
          [this](const Shape& s) { return rand(s); });
}

}  // namespace
}  // namespace dpl::test
