// Tensor arithmetic without autograd: values against the host's own arithmetic, the Variable
// operators' values, memory formats, views, in-place forms and refused inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<float> values(const Tensor& t) { return t.to(kFloat32).to_vector<float>(); }

// Applies f to the elements of a and b on the host.
template <typename F>
std::vector<float> host_map(const Tensor& a, const Tensor& b, F f) {
  const std::vector<float> va = values(a), vb = values(b);
  std::vector<float> out(va.size());
  for (std::size_t i = 0; i < va.size(); ++i) out[i] = f(va[i], vb[i]);
  return out;
}

class TensorOps : public ::testing::Test {
 protected:
  Generator gen_{3};
  Tensor a_ = Tensor::uniform({2, 3, 4}, -2.f, 2.f, gen_);
  Tensor b_ = Tensor::uniform({2, 3, 4}, 0.5f, 2.f, gen_);
};

TEST_F(TensorOps, TensorTensorMatchesHostArithmetic) {
  EXPECT_THAT(values(a_ + b_), ElementsAreArray(host_map(a_, b_, [](float x, float y) { return x + y; })));
  EXPECT_THAT(values(a_ - b_), ElementsAreArray(host_map(a_, b_, [](float x, float y) { return x - y; })));
  EXPECT_THAT(values(a_ * b_), ElementsAreArray(host_map(a_, b_, [](float x, float y) { return x * y; })));
  EXPECT_THAT(values(a_ / b_), ElementsAreArray(host_map(a_, b_, [](float x, float y) { return x / y; })));
  EXPECT_EQ((a_ + b_).shape(), a_.shape());
  EXPECT_FALSE((a_ + b_).shares_storage_with(a_));
}

TEST_F(TensorOps, ScalarOperatorsGiveTheVariableOperatorsValues) {
  const Variable v(a_);
  EXPECT_EQ(values(a_ + 0.25f), values((v + 0.25f).data()));
  EXPECT_EQ(values(0.25f + a_), values((0.25f + v).data()));
  EXPECT_EQ(values(a_ - 0.25f), values((v - 0.25f).data()));
  EXPECT_EQ(values(0.25f - a_), values((0.25f - v).data()));
  EXPECT_EQ(values(a_ * 3.f), values((v * 3.f).data()));
  EXPECT_EQ(values(3.f * a_), values((3.f * v).data()));
  EXPECT_EQ(values(a_ / 3.f), values((v / 3.f).data()));
  EXPECT_EQ(values(-a_), values((-v).data()));
  const std::vector<float> va = values(a_);
  std::vector<float> want(va.size());
  for (std::size_t i = 0; i < va.size(); ++i) want[i] = va[i] * 2.f - 1.f;
  EXPECT_THAT(values((a_ * 2.f) - 1.f), ElementsAreArray(want));
}

TEST_F(TensorOps, InPlaceFormsWriteTheLeftOperand) {
  Tensor x = a_.clone();
  const Tensor alias = x;  // a second view of the same memory sees the writes
  x += b_;
  EXPECT_THAT(values(alias), ElementsAreArray(values(a_ + b_)));
  x -= b_;
  x *= b_;
  EXPECT_EQ(values(alias), values((a_ + b_ - b_) * b_));
  x /= b_;
  EXPECT_EQ(values(alias), values((a_ + b_ - b_) * b_ / b_));
  Tensor y = a_.clone();
  (y *= 2.f) += 1.f;
  EXPECT_EQ(values(y), values(a_ * 2.f + 1.f));
  y -= 1.f;
  y /= 2.f;
  EXPECT_EQ(values(y), values((a_ * 2.f + 1.f - 1.f) / 2.f));
  Tensor z = a_.clone();
  z *= z;  // the right operand may be the left one
  EXPECT_EQ(values(z), values(a_ * a_));
}

TEST_F(TensorOps, InPlaceOnANarrowedViewWritesOnlyThatSlice) {
  Tensor base = Tensor::zeros({4, 3});
  Tensor column = base.narrow(1, 1, 1);  // neither contiguous nor channels-last
  column += 2.f;
  column *= Tensor::full({4, 1}, 3.f);
  EXPECT_THAT(values(base), ElementsAreArray({0.f, 6.f, 0.f, 0.f, 6.f, 0.f, 0.f, 6.f, 0.f, 0.f, 6.f, 0.f}));
  Tensor sum = column + column;
  EXPECT_TRUE(sum.is_contiguous());
  EXPECT_THAT(values(sum), ElementsAreArray({12.f, 12.f, 12.f, 12.f}));
}

TEST_F(TensorOps, KeepsTheLeftOperandsFormatAndAcceptsAnotherOnTheRight) {
  const Tensor nchw = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen_);
  const Tensor nhwc = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen_).to_channels_last();
  const Tensor sum = nhwc + nchw;
  EXPECT_TRUE(sum.is_channels_last());
  EXPECT_FALSE(sum.is_contiguous());
  EXPECT_THAT(values(sum), ElementsAreArray(host_map(nhwc, nchw, [](float x, float y) { return x + y; })));
  EXPECT_TRUE((nchw * nhwc).is_contiguous());
  EXPECT_TRUE((nhwc * 2.f).is_channels_last());
  Tensor cl_copy = Tensor::empty_channels_last(nhwc.shape());
  cl_copy.copy_(nhwc);
  cl_copy -= nchw;
  EXPECT_TRUE(cl_copy.is_channels_last());
  EXPECT_THAT(values(cl_copy), ElementsAreArray(host_map(nhwc, nchw, [](float x, float y) { return x - y; })));
}

TEST_F(TensorOps, SixteenBitTensorsRoundOnceLikeTheVariableOperators) {
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor a = a_.to(dt), b = b_.to(dt);
    const Tensor sum = a + b;
    EXPECT_EQ(sum.dtype(), dt);
    // The kernels compute in float32 and round once, as rounding the float32 result does.
    const Tensor want = Tensor::from_vector(host_map(a, b, [](float x, float y) { return x / y; }), a.shape()).to(dt);
    EXPECT_EQ(values(a / b), values(want)) << dtype_name(dt);
    EXPECT_EQ(values(a * 0.3f + 0.1f), values((Variable(a) * 0.3f + 0.1f).data())) << dtype_name(dt);
  }
}

TEST_F(TensorOps, RefusesMismatchedOrNonFloatOperands) {
  const Tensor other_shape = Tensor::ones({3, 2, 4});
  DPL_EXPECT_ERROR(a_ + other_shape,
                   AllOf(HasSubstr("Tensor operator+"), HasSubstr("one shape"), HasSubstr("(2, 3, 4)"),
                         HasSubstr("(3, 2, 4)")));
  DPL_EXPECT_ERROR(a_ / a_.to(kBFloat16), AllOf(HasSubstr("Tensor operator/"), HasSubstr("one dtype")));
  Tensor labels = Tensor::zeros({2}, kInt32);
  DPL_EXPECT_ERROR(labels *= 2.f, AllOf(HasSubstr("Tensor operator*="), HasSubstr("int32")));
  DPL_EXPECT_ERROR(Tensor() - a_, AllOf(HasSubstr("Tensor operator-"), HasSubstr("left operand is undefined")));
  Tensor x = a_.clone();
  DPL_EXPECT_ERROR(x -= Tensor(), HasSubstr("right operand is undefined"));
}

}  // namespace
}  // namespace dpl
