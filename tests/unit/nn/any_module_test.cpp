// Modules whose forward takes several inputs, AnyModule's checked calls, and Sequential over
// AnyModules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// x W^T masked: a forward of two inputs.
class MaskedLinear : public nn::Module {
 public:
  explicit MaskedLinear(Generator& gen)
      : linear_(register_module("linear", std::make_shared<nn::Linear>(3, 2, true, gen))) {}
  Variable forward(const Variable& x, const Variable& mask) { return mul(linear_->forward(x), mask); }

 private:
  std::shared_ptr<nn::Linear> linear_;
};

// A forward of mixed argument types and a non-Variable result.
using Scaled = std::pair<Variable, float>;
class Scaler : public nn::Module {
 public:
  Scaled forward(Variable x, float scale) const { return {x * scale, scale}; }
};

TEST(AnyModule, CallsAForwardOfSeveralInputs) {
  Generator gen(1);
  auto masked = std::make_shared<MaskedLinear>(gen);
  const Variable x(Tensor::normal({4, 3}, 0.f, 1.f, gen));
  const Variable mask(Tensor::from_vector<float>({1, 0, 0, 1, 1, 1, 0, 0}, {4, 2}));
  const nn::AnyModule any(masked);
  EXPECT_EQ(any.arity(), 2u);
  EXPECT_EQ(any.name(), "dpl::(anonymous namespace)::MaskedLinear");
  EXPECT_EQ(any(x, mask).data().to_vector<float>(), masked->forward(x, mask).data().to_vector<float>());
  EXPECT_EQ(any.ptr<MaskedLinear>(), masked);
  EXPECT_EQ(any.ptr(), masked);
  const auto [y, s] = nn::AnyModule(Scaler()).forward<Scaled>(x, 2.f);
  EXPECT_FLOAT_EQ(s, 2.f);
  EXPECT_EQ(y.data().to_vector<float>(), (x * 2.f).data().to_vector<float>());
}

TEST(AnyModule, RefusesArgumentsThatDoNotFitAndSaysWhat) {
  Generator gen(2);
  const nn::AnyModule any(std::make_shared<MaskedLinear>(gen));
  const Variable x(Tensor::ones({1, 3}));
  DPL_EXPECT_ERROR(any(x), AllOf(HasSubstr("MaskedLinear::forward takes 2 arguments"),
                                 HasSubstr("(dpl::Variable, dpl::Variable)"), HasSubstr("got 1 (dpl::Variable)")));
  DPL_EXPECT_ERROR(any(x, Tensor::ones({1, 2})),
                   AllOf(HasSubstr("got 2 (dpl::Variable, dpl::Tensor)"), HasSubstr("must match exactly")));
  const nn::AnyModule scaler(Scaler{});
  DPL_EXPECT_ERROR(scaler.forward<Scaled>(x, 2), HasSubstr("(dpl::Variable, float), got 2 "
                                                                               "(dpl::Variable, int)"));
  DPL_EXPECT_ERROR(scaler(x, 2.f), AllOf(HasSubstr("returns std::pair<dpl::Variable, float>"),
                                         HasSubstr("asked for dpl::Variable")));
  DPL_EXPECT_ERROR(any.ptr<nn::Linear>(), AllOf(HasSubstr("as dpl::nn::Linear"), HasSubstr("MaskedLinear")));
  DPL_EXPECT_ERROR(nn::AnyModule()(x), HasSubstr("empty"));
  DPL_EXPECT_ERROR(nn::AnyModule(std::shared_ptr<nn::Linear>()), HasSubstr("null"));
}

TEST(AnyModule, TheSingleInputEntryOfAMultiInputModuleSaysWhichModule) {
  Generator gen(3);
  MaskedLinear masked(gen);
  nn::Module& as_module = masked;
  DPL_EXPECT_ERROR(as_module(Variable(Tensor::ones({1, 3}))),
                   AllOf(HasSubstr("MaskedLinear has no forward(const Variable&)"), HasSubstr("AnyModule")));
}

TEST(Sequential, HoldsAnyModulesAndRunsAChain) {
  Generator gen(4);
  auto first = std::make_shared<nn::Linear>(3, 4, true, gen);
  nn::Sequential seq(first, nn::AnyModule(nn::ReLU()), nn::Linear(4, 2, true, gen));
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[0].ptr<nn::Linear>(), first);
  EXPECT_EQ(seq[1].name(), "dpl::nn::ReLU");
  const Variable x(Tensor::normal({5, 3}, 0.f, 1.f, gen));
  const Variable want = seq[2].ptr<nn::Linear>()->forward(relu(first->forward(x)));
  EXPECT_EQ(seq(x).data().to_vector<float>(), want.data().to_vector<float>());
  DPL_EXPECT_ERROR(seq[3], HasSubstr("out of range"));
  // A module of two inputs in a single-input chain: the error names it.
  seq.append(std::make_shared<MaskedLinear>(gen));
  DPL_EXPECT_ERROR(seq(x), AllOf(HasSubstr("MaskedLinear::forward takes 2 arguments"), HasSubstr("got 1")));
  // Its parameters are registered like any other module's.
  EXPECT_EQ(seq.named_parameters().back().first, "3.linear.bias");
}

TEST(Sequential, NestedSequentialsAndResNetStagesRunThroughAnyModule) {
  Generator gen(5);
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(2, 2, true, gen), nn::ReLU());
  nn::Sequential outer(inner, nn::Linear(2, 1, true, gen));
  const Variable x(Tensor::normal({3, 2}, 0.f, 1.f, gen));
  EXPECT_EQ(outer(x).data().to_vector<float>(), (*outer[1].ptr<nn::Linear>())((*inner)(x)).data().to_vector<float>());
  models::ResNetOptions options;
  options.num_classes = 3;
  auto net = models::resnet("resnet18", options, gen);
  EXPECT_EQ((*net)(Variable(Tensor::normal({2, 3, 32, 32}, 0.f, 1.f, gen))).data().shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace dpl
