// Bad input: every rejection is a dpl::Error whose message names the op and what it expected and
// what it received, so a user can fix the call from the message alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Variable var(const Shape& s, DType t = kFloat32) { return Variable(Tensor::zeros(s, t), true); }

TEST(BadInput, MatmulShapeMismatch) {
  DPL_EXPECT_ERROR(matmul(var({2, 3}), var({4, 5})),
                   AllOf(HasSubstr("matmul"), HasSubstr("(2, 3)"), HasSubstr("(4, 5)"), HasSubstr("3 rows")));
  // A 1-D operand is a vector (PyTorch's matmul); its extent must still fit.
  DPL_EXPECT_ERROR(matmul(var({2, 3}), var({4})),
                   AllOf(HasSubstr("matmul"), HasSubstr("(2, 3)"), HasSubstr("(4,)"), HasSubstr("3 rows")));
  DPL_EXPECT_ERROR(bmm(var({2, 3}), var({3, 2})),
                   AllOf(HasSubstr("bmm"), HasSubstr("3 dimensions"), HasSubstr("(2, 3)")));
}

TEST(BadInput, LinearShapeMismatch) {
  DPL_EXPECT_ERROR(linear(var({2, 3}), var({4, 5})),
                   AllOf(HasSubstr("linear"), HasSubstr("(..., 5)"), HasSubstr("(4, 5)"), HasSubstr("(2, 3)")));
  DPL_EXPECT_ERROR(linear(var({2, 3}), var({4, 3}), var({3})),
                   AllOf(HasSubstr("linear"), HasSubstr("bias"), HasSubstr("(4,)"), HasSubstr("(3,)")));
  DPL_EXPECT_ERROR(linear(var({2, 3, 1}), var({4, 3})), AllOf(HasSubstr("linear"), HasSubstr("(2, 3, 1)")));
  // The module says the same, since it forwards to the op.
  nn::Linear layer(5, 2);
  DPL_EXPECT_ERROR(layer(var({3, 4})), AllOf(HasSubstr("linear"), HasSubstr("(..., 5)"), HasSubstr("(3, 4)")));
}

TEST(BadInput, ElementwiseShapeMismatch) {
  DPL_EXPECT_ERROR(add(var({2, 3}), var({4})), AllOf(HasSubstr("add"), HasSubstr("(2, 3)"), HasSubstr("(4,)")));
  DPL_EXPECT_ERROR(sub(var({2, 3}), var({3, 2})), AllOf(HasSubstr("sub"), HasSubstr("(2, 3)"), HasSubstr("(3, 2)")));
  DPL_EXPECT_ERROR(mul(var({2, 3}), var({2})),
                   AllOf(HasSubstr("mul"), HasSubstr("(2, 3)"), HasSubstr("(2,)"), HasSubstr("(3,)")));
  // Broadcasting is PyTorch's: the first operand is expanded too, and only extents of 1 stretch.
  EXPECT_EQ(add(var({3}), var({2, 3})).shape(), (Shape{2, 3}));
  DPL_EXPECT_ERROR(add(var({2, 1}), var({3, 3})), AllOf(HasSubstr("add"), HasSubstr("(2, 1)"), HasSubstr("(3, 3)")));
}

TEST(BadInput, DtypeMismatch) {
  const Variable logits = var({2, 3});
  DPL_EXPECT_ERROR(softmax_cross_entropy(logits, Tensor::zeros({2})),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("int32"), HasSubstr("float32")));
  DPL_EXPECT_ERROR(relu(Variable(Tensor::zeros({4}, kInt32))),
                   AllOf(HasSubstr("relu"), HasSubstr("float32"), HasSubstr("int32")));
  DPL_EXPECT_ERROR(add(var({2}), Variable(Tensor::zeros({2}, kInt64))),
                   AllOf(HasSubstr("add"), HasSubstr("float32"), HasSubstr("int64")));
  DPL_EXPECT_ERROR(softmax_cross_entropy(Variable(Tensor::zeros({2, 3}, kInt32)), Tensor::zeros({2}, kInt32)),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("logits"), HasSubstr("int32")));
}

TEST(BadInput, LabelsOutOfRange) {
  const Variable logits = var({3, 4});
  DPL_EXPECT_ERROR(softmax_cross_entropy(logits, Tensor::from_vector<std::int32_t>({0, 4, 1}, {3})),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("[0, 4)"), HasSubstr("[0, 4]")));
  DPL_EXPECT_ERROR(softmax_cross_entropy(logits, Tensor::from_vector<std::int32_t>({-1, 2, 1}, {3})),
                   AllOf(HasSubstr("[0, 4)"), HasSubstr("[-1, 2]")));
  DPL_EXPECT_ERROR(accuracy(logits, Tensor::from_vector<std::int32_t>({9, 0, 0}, {3})),
                   AllOf(HasSubstr("accuracy"), HasSubstr("[0, 4)"), HasSubstr("9")));
}

TEST(BadInput, LabelsOfTheWrongShape) {
  DPL_EXPECT_ERROR(softmax_cross_entropy(var({3, 4}), Tensor::zeros({2}, kInt32)),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("(3,)"), HasSubstr("(3, 4)"), HasSubstr("(2,)")));
  DPL_EXPECT_ERROR(softmax_cross_entropy(var({3}), Tensor::zeros({3}, kInt32)),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("2 dimensions"), HasSubstr("(3,)")));
}

TEST(BadInput, BackwardOnANonScalar) {
  const Variable y = mul(var({2, 3}), var({2, 3}));
  DPL_EXPECT_ERROR(y.backward(), AllOf(HasSubstr("backward"), HasSubstr("one element"), HasSubstr("(2, 3)")));
}

TEST(BadInput, ReadingAViewPastItsStorage) {
  const Tensor t = Tensor::zeros({4, 4});
  DPL_EXPECT_ERROR(t.view_range(10, {2, 4}), AllOf(HasSubstr("view_range"), HasSubstr("(2, 4)"),
                                                   HasSubstr("8 elements"), HasSubstr("offset 10"),
                                                   HasSubstr("16 elements")));
  DPL_EXPECT_ERROR(Tensor(t.storage(), 12, {2, 4}, {4, 1}, kFloat32),
                   AllOf(HasSubstr("(2, 4)"), HasSubstr("offset 12"), HasSubstr("reaches element 19"),
                         HasSubstr("holds 16 elements")));
}

TEST(BadInput, ReshapeToTheWrongElementCount) {
  const Tensor t = Tensor::zeros({2, 3});
  DPL_EXPECT_ERROR(t.reshape({4, 2}), AllOf(HasSubstr("reshape"), HasSubstr("(2, 3)"), HasSubstr("6 elements"),
                                            HasSubstr("(4, 2)"), HasSubstr("8 elements")));
  DPL_EXPECT_ERROR(t.reshape({4, -1}), AllOf(HasSubstr("reshape"), HasSubstr("(2, 3)"), HasSubstr("(4, -1)")));
  DPL_EXPECT_ERROR(t.reshape({-1, -1}), AllOf(HasSubstr("reshape"), HasSubstr("at most one")));
  DPL_EXPECT_ERROR(reshape(var({2, 3}), {5}), AllOf(HasSubstr("reshape"), HasSubstr("(2, 3)"), HasSubstr("(5,)")));
  // A strided view cannot be reshaped in place; the message says what to do.
  DPL_EXPECT_ERROR(Tensor::zeros({3, 4}).narrow(1, 0, 2).reshape({6}),
                   AllOf(HasSubstr("reshape"), HasSubstr("contiguous")));
}

TEST(BadInput, UndefinedOperands) {
  DPL_EXPECT_ERROR(relu(Variable()), AllOf(HasSubstr("relu"), HasSubstr("undefined")));
  DPL_EXPECT_ERROR(matmul(var({2, 2}), Variable()), AllOf(HasSubstr("matmul"), HasSubstr("second operand")));
  DPL_EXPECT_ERROR(Variable().data(), HasSubstr("undefined"));
}

TEST(BadInput, EmptyReductionsAndBatches) {
  DPL_EXPECT_ERROR(mean(var({0})), AllOf(HasSubstr("mean"), HasSubstr("non-empty"), HasSubstr("(0,)")));
  DPL_EXPECT_ERROR(softmax_cross_entropy(var({0, 3}), Tensor::zeros({0}, kInt32)),
                   AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("(0, 3)")));
}

TEST(BadInput, SetThreadsRejectsZero) {
  const int before = num_threads();
  DPL_EXPECT_ERROR(set_num_threads(0), AllOf(HasSubstr("set_num_threads"), HasSubstr("got 0")));
  EXPECT_EQ(num_threads(), before);
}

// --- activations, dropout, softmax, argmax, mean squared error -----------------------------------

TEST(BadInput, ActivationsRejectNonFloatInput) {
  const Variable ints(Tensor::zeros({2, 3}, kInt32));
  // gelu's second parameter (the approximation) has a default: a lambda gives the one-input form.
  Variable (*const gelu_exact)(const Variable&) = [](const Variable& x) { return gelu(x); };
  for (const auto& [name, f] : std::vector<std::pair<std::string, Variable (*)(const Variable&)>>{
           {"sigmoid", sigmoid},
           {"tanh", tanh},
           {"gelu", gelu_exact},
           {"softmax", softmax},
           {"log_softmax", log_softmax}})
    DPL_EXPECT_ERROR(f(ints), AllOf(HasSubstr(name), HasSubstr("float32, bfloat16 or float16"), HasSubstr("int32")));
  DPL_EXPECT_ERROR(leaky_relu(ints), AllOf(HasSubstr("leaky_relu"), HasSubstr("int32")));
  DPL_EXPECT_ERROR(argmax(ints), AllOf(HasSubstr("argmax"), HasSubstr("int32")));
  DPL_EXPECT_ERROR(sigmoid(Variable()), AllOf(HasSubstr("sigmoid"), HasSubstr("undefined")));
}

TEST(BadInput, SoftmaxAndArgmaxNeedALastDimension) {
  DPL_EXPECT_ERROR(softmax(var({})), AllOf(HasSubstr("softmax"), HasSubstr("at least 1 dimension"), HasSubstr("()")));
  DPL_EXPECT_ERROR(argmax(var({3, 0})), AllOf(HasSubstr("argmax"), HasSubstr("non-empty"), HasSubstr("(3, 0)")));
}

TEST(BadInput, DropoutProbabilityOutOfRange) {
  Generator gen(1);
  for (float p : {-0.1f, 1.f, 1.5f}) {
    DPL_EXPECT_ERROR(dropout(var({2}), p, gen), AllOf(HasSubstr("dropout"), HasSubstr("[0, 1)")));
    DPL_EXPECT_ERROR(nn::Dropout(p, gen), AllOf(HasSubstr("Dropout"), HasSubstr("[0, 1)")));
  }
  DPL_EXPECT_ERROR(dropout(var({2}), 1.f, gen), HasSubstr("got 1"));
}

TEST(BadInput, MseLossShapesAndDtypes) {
  DPL_EXPECT_ERROR(mse_loss(var({2, 3}), var({3, 2})),
                   AllOf(HasSubstr("mse_loss"), HasSubstr("(2, 3)"), HasSubstr("(3, 2)")));
  DPL_EXPECT_ERROR(mse_loss(var({2}), var({2}, kBFloat16)),
                   AllOf(HasSubstr("mse_loss"), HasSubstr("float32"), HasSubstr("bfloat16")));
  DPL_EXPECT_ERROR(mse_loss(var({0}), var({0})), AllOf(HasSubstr("mse_loss"), HasSubstr("non-empty")));
}

TEST(BadInput, LabelSmoothingOutOfRange) {
  const Tensor labels = Tensor::zeros({2}, kInt32);
  for (float e : {-0.5f, 1.f})
    DPL_EXPECT_ERROR(softmax_cross_entropy(var({2, 3}), labels, e),
                     AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("label_smoothing in [0, 1)")));
}

}  // namespace
}  // namespace dpl
