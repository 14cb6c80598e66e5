// AdamW, RMSprop, Adagrad, LAMB and LARS against PyTorch's trajectories (torch.optim, and the
// formulas of docs/optimizers.md in plain torch for LAMB and LARS): tests/golden/optimizer_golden.txt,
// written by tests/golden/make_optimizer_golden.py. Four parameter tensors, one of them zero at
// the start, take four steps from fixed gradients; the parameters after every step must match.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/parameter_bag.hpp"

namespace dpl::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<std::string> kNames = {"a", "b", "c", "z"};

std::unique_ptr<optim::Optimizer> optimizer_for(const GoldenCase& c) {
  const auto f = [&c](const char* key) { return static_cast<float>(c.param(key)); };
  const std::string kind = c.name.substr(0, c.name.find('_'));
  if (kind == "adamw")
    return std::make_unique<optim::AdamW>(
        optim::AdamWOptions(f("lr")).betas(f("beta1"), f("beta2")).eps(f("eps")).weight_decay(f("weight_decay")));
  if (kind == "rmsprop")
    return std::make_unique<optim::RMSprop>(optim::RMSpropOptions(f("lr"))
                                                .alpha(f("alpha"))
                                                .eps(f("eps"))
                                                .weight_decay(f("weight_decay"))
                                                .momentum(f("momentum"))
                                                .centered(c.param("centered") != 0.0));
  if (kind == "adagrad")
    return std::make_unique<optim::Adagrad>(optim::AdagradOptions(f("lr"))
                                                .lr_decay(f("lr_decay"))
                                                .weight_decay(f("weight_decay"))
                                                .initial_accumulator_value(f("initial_accumulator_value"))
                                                .eps(f("eps")));
  if (kind == "lamb")
    return std::make_unique<optim::LAMB>(
        optim::LAMBOptions(f("lr")).betas(f("beta1"), f("beta2")).eps(f("eps")).weight_decay(f("weight_decay")));
  if (kind == "lars") {
    optim::LARSOptions o(f("lr"));
    o.momentum(f("momentum")).weight_decay(f("weight_decay")).trust_coefficient(f("trust_coefficient"));
    if (c.param("exclude_1d") != 0.0) o.exclude_one_dimensional();
    return std::make_unique<optim::LARS>(o);
  }
  ADD_FAILURE() << "no optimizer for golden case " << c.name;
  return nullptr;
}

TEST(RulesGolden, TrajectoriesMatchPyTorch) {
  const std::vector<GoldenCase> cases = load_golden("optimizer_golden.txt");
  ASSERT_EQ(cases.size(), 11u) << "tests/golden/optimizer_golden.txt";
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    ParameterBag bag;
    std::vector<Variable> params;
    for (const std::string& n : kNames) params.push_back(bag.add(n, c.tensor("p_" + n).clone()));
    std::unique_ptr<optim::Optimizer> opt = optimizer_for(c);
    ASSERT_NE(opt, nullptr);
    opt->setup(bag);
    for (int k = 1; c.tensors.count("g" + std::to_string(k) + "_a") == 1; ++k) {
      for (std::size_t i = 0; i < kNames.size(); ++i) {
        Tensor g = params[i].grad();
        g.copy_(c.tensor("g" + std::to_string(k) + "_" + kNames[i]));
      }
      opt->update();
      for (std::size_t i = 0; i < kNames.size(); ++i)
        expect_golden(params[i].data(), c.tensor("p" + std::to_string(k) + "_" + kNames[i]),
                      c.name + " " + kNames[i] + " after step " + std::to_string(k), 2e-5f, 1e-6f);
    }
    EXPECT_EQ(opt->t(), 4);
  }
}

TEST(Rules, DefaultsArePyTorchs) {
  const optim::AdamW adamw;
  EXPECT_EQ(adamw.lr(), 1e-3f);
  EXPECT_EQ(adamw.weight_decay(), 1e-2f);
  EXPECT_EQ(adamw.beta1(), 0.9f);
  EXPECT_EQ(adamw.beta2(), 0.999f);
  EXPECT_EQ(adamw.eps(), 1e-8f);
  const optim::RMSprop rmsprop;
  EXPECT_EQ(rmsprop.lr(), 1e-2f);
  EXPECT_EQ(rmsprop.options().alpha(), 0.99f);
  EXPECT_EQ(rmsprop.options().eps(), 1e-8f);
  EXPECT_EQ(rmsprop.options().momentum(), 0.f);
  EXPECT_FALSE(rmsprop.options().centered());
  EXPECT_EQ(rmsprop.weight_decay(), 0.f);
  const optim::Adagrad adagrad;
  EXPECT_EQ(adagrad.lr(), 1e-2f);
  EXPECT_EQ(adagrad.options().eps(), 1e-10f);
  EXPECT_EQ(adagrad.options().lr_decay(), 0.f);
  EXPECT_EQ(adagrad.options().initial_accumulator_value(), 0.f);
  const optim::LAMB lamb;
  EXPECT_EQ(lamb.lr(), 1e-3f);
  EXPECT_EQ(lamb.eps(), 1e-6f);
  EXPECT_EQ(lamb.weight_decay(), 1e-2f);
  const optim::LARS lars;
  EXPECT_EQ(lars.lr(), 0.1f);
  EXPECT_EQ(lars.options().momentum(), 0.9f);
  EXPECT_EQ(lars.options().trust_coefficient(), 1e-3f);
}

TEST(Rules, RejectBadSettingsByName) {
  DPL_EXPECT_ERROR(optim::AdamW(optim::AdamWOptions().betas(1.f, 0.9f)), AllOf(HasSubstr("AdamW"), HasSubstr("beta1=1")));
  DPL_EXPECT_ERROR(optim::AdamW(optim::AdamWOptions().weight_decay(-1.f)), HasSubstr("-1"));
  DPL_EXPECT_ERROR(optim::RMSprop(optim::RMSpropOptions().alpha(1.5f)), AllOf(HasSubstr("RMSprop"), HasSubstr("alpha")));
  DPL_EXPECT_ERROR(optim::RMSprop(optim::RMSpropOptions().momentum(1.f)), HasSubstr("momentum"));
  DPL_EXPECT_ERROR(optim::Adagrad(optim::AdagradOptions().lr_decay(-0.1f)), AllOf(HasSubstr("Adagrad"), HasSubstr("lr_decay")));
  DPL_EXPECT_ERROR(optim::Adagrad(optim::AdagradOptions().eps(0.f)), HasSubstr("eps"));
  DPL_EXPECT_ERROR(optim::LAMB(optim::LAMBOptions(-1.f)), AllOf(HasSubstr("LAMB"), HasSubstr("learning rate")));
  DPL_EXPECT_ERROR(optim::LARS(optim::LARSOptions().trust_coefficient(0.f)),
                   AllOf(HasSubstr("LARS"), HasSubstr("trust_coefficient")));
}

// The state names each rule exports, and a checkpoint refused when a fixed setting differs.
TEST(Rules, StateIsNamedAndSettingsAreChecked) {
  ParameterBag bag;
  bag.add("w", Tensor::from_vector<float>({1.f, -2.f, 0.5f}, {3}));
  optim::RMSprop centered(optim::RMSpropOptions().momentum(0.5f).centered(true));
  centered.setup(bag);
  std::vector<std::string> names;
  for (const auto& [name, t] : centered.state()) names.push_back(name);
  EXPECT_THAT(names, ::testing::ElementsAre("square_avg", "momentum_buffer", "grad_avg"));
  optim::RMSprop plain;
  plain.setup(bag);
  EXPECT_EQ(plain.state().size(), 1u);
  DPL_EXPECT_ERROR(plain.load_state(plain.state(), centered.state_scalars()),
                   AllOf(HasSubstr("RMSprop::load_state"), HasSubstr("momentum")));

  optim::LARS lars;
  lars.setup(bag);
  optim::LARS other(optim::LARSOptions().trust_coefficient(0.02f));
  other.setup(bag);
  DPL_EXPECT_ERROR(other.load_state(lars.state(), lars.state_scalars()), HasSubstr("trust_coefficient"));
  optim::Adagrad adagrad(optim::AdagradOptions().initial_accumulator_value(0.5f));
  adagrad.setup(bag);
  EXPECT_EQ(adagrad.state().at(0).second.to_vector<float>().at(0), 0.5f);
  // The padding after the parameter's three elements stays zero, as in every arena.
  EXPECT_EQ(adagrad.state().at(0).second.to_vector<float>().at(3), 0.f);
}

}  // namespace
}  // namespace dpl::test
