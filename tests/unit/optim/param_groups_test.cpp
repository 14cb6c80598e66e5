// Parameter groups: every rule must update each group's parameters exactly as a separate
// optimizer with that group's settings would; the groups follow the learning rate, survive
// MixedPrecision's master weights by name, are checked by load_state, and bad groups are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/parameter_bag.hpp"

namespace dpl::test {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A rule built with a given learning rate and weight decay.
using MakeRule = std::function<std::unique_ptr<optim::Optimizer>(float lr, float weight_decay)>;

struct RuleCase {
  std::string name;
  MakeRule make;
};

std::vector<RuleCase> rule_cases() {
  return {
      {"SGD", [](float lr, float wd) { return std::make_unique<optim::SGD>(optim::SGDOptions(lr).weight_decay(wd)); }},
      {"MomentumSGD",
       [](float lr, float wd) {
         return std::make_unique<optim::MomentumSGD>(optim::MomentumSGDOptions(lr).momentum(0.8f).weight_decay(wd));
       }},
      {"Adam", [](float lr, float wd) { return std::make_unique<optim::Adam>(optim::AdamOptions(lr).weight_decay(wd)); }},
      {"AdamW",
       [](float lr, float wd) { return std::make_unique<optim::AdamW>(optim::AdamWOptions(lr).weight_decay(wd)); }},
      {"RMSpropCenteredMomentum",
       [](float lr, float wd) {
         return std::make_unique<optim::RMSprop>(
             optim::RMSpropOptions(lr).momentum(0.5f).centered(true).weight_decay(wd));
       }},
      {"Adagrad",
       [](float lr, float wd) {
         return std::make_unique<optim::Adagrad>(optim::AdagradOptions(lr).lr_decay(0.1f).weight_decay(wd));
       }},
      {"LAMB", [](float lr, float wd) { return std::make_unique<optim::LAMB>(optim::LAMBOptions(lr).weight_decay(wd)); }},
      {"LARS",
       [](float lr, float wd) {
         return std::make_unique<optim::LARS>(optim::LARSOptions(lr).trust_coefficient(0.02f).weight_decay(wd));
       }},
  };
}

// Parameters in an order where the groups interleave: the ranges of one group are not contiguous.
const std::vector<std::pair<std::string, Shape>> kParameters = {
    {"enc.weight", {4, 3}}, {"enc.bias", {4}}, {"dec.weight", {3, 4}}, {"dec.bias", {3}}, {"head.weight", {5, 3}}};

// A bag with the chosen parameters as children named like kParameters (enc, dec, head), values
// drawn from one generator so that two bags of the same names hold the same values.
std::unique_ptr<ParameterBag> make_bag(const std::vector<std::string>& names) {
  auto bag = std::make_unique<ParameterBag>();
  std::map<std::string, std::shared_ptr<ParameterBag>> children;
  for (std::size_t i = 0; i < kParameters.size(); ++i) {
    const auto& [name, shape] = kParameters[i];
    Generator gen(40 + i);
    const Tensor value = Tensor::normal(shape, 0.f, 1.f, gen);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    const std::string module = name.substr(0, name.find('.'));
    auto& child = children[module];
    if (!child) child = bag->child(module, std::make_shared<ParameterBag>());
    child->add(name.substr(name.find('.') + 1), value);
  }
  return bag;
}

const nn::ArenaEntry& entry_of(nn::Module& model, const std::string& name) {
  for (const nn::ArenaEntry& e : model.arena().entries())
    if (e.name == name) return e;
  throw std::runtime_error("no parameter " + name);
}

// Step `step`'s gradient of parameter i: the same in every bag that holds it.
void set_gradients(nn::Module& model, int step) {
  for (std::size_t i = 0; i < kParameters.size(); ++i) {
    const auto& [name, shape] = kParameters[i];
    bool held = false;
    for (const nn::ArenaEntry& e : model.arena().entries()) held = held || e.name == name;
    if (!held) continue;
    Generator gen(1000 + 10 * static_cast<std::uint64_t>(step) + i);
    const nn::ArenaEntry& e = entry_of(model, name);
    model.arena().grads().narrow(0, e.offset, e.numel).copy_(Tensor::normal({e.numel}, 0.f, 1.f, gen));
  }
}

std::vector<float> values_of(nn::Module& model, const std::string& name) {
  const nn::ArenaEntry& e = entry_of(model, name);
  return model.arena().params().narrow(0, e.offset, e.numel).to(kFloat32).to_vector<float>();
}

class ParamGroups : public ::testing::TestWithParam<RuleCase> {};

// Groups: 1-D parameters without decay; "dec.weight" at a tenth of the lr. The default group
// (enc.weight, head.weight) keeps the optimizer's settings. Three steps, the lr halved before
// the third as a schedule would; each group must end as its own optimizer ends.
TEST_P(ParamGroups, EachGroupStepsAsASeparateOptimizerWithItsSettings) {
  const MakeRule& make = GetParam().make;
  const float lr = 0.1f, wd = 0.05f;
  auto model = make_bag({"enc.weight", "enc.bias", "dec.weight", "dec.bias", "head.weight"});
  auto grouped = make(lr, wd);
  grouped->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f));
  grouped->add_param_group(optim::ParamGroup::named({"dec.weight"}, "decoder").lr(lr / 10));
  grouped->setup(*model);

  struct Reference {
    std::unique_ptr<ParameterBag> bag;
    std::unique_ptr<optim::Optimizer> opt;
    float lr_share;
  };
  std::vector<Reference> refs;
  refs.push_back({make_bag({"enc.weight", "head.weight"}), make(lr, wd), 1.f});
  refs.push_back({make_bag({"enc.bias", "dec.bias"}), make(lr, 0.f), 1.f});
  refs.push_back({make_bag({"dec.weight"}), make(lr / 10, wd), 0.1f});
  for (Reference& r : refs) r.opt->setup(*r.bag);

  for (int step = 0; step < 3; ++step) {
    const float step_lr = step == 2 ? lr / 2 : lr;
    grouped->set_lr(step_lr);
    set_gradients(*model, step);
    grouped->update();
    for (Reference& r : refs) {
      r.opt->set_lr(step_lr * r.lr_share);
      set_gradients(*r.bag, step);
      r.opt->update();
    }
  }
  for (Reference& r : refs)
    for (const nn::ArenaEntry& e : r.bag->arena().entries()) {
      const std::vector<float> want = values_of(*r.bag, e.name), got = values_of(*model, e.name);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-6f * (1.f + std::abs(want[i]))) << e.name << "[" << i << "]";
    }

  const std::vector<optim::ParamGroupInfo> groups = grouped->param_groups();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].label, "default");
  EXPECT_THAT(groups[0].parameters, ElementsAre("enc.weight", "head.weight"));
  EXPECT_THAT(groups[1].parameters, ElementsAre("enc.bias", "dec.bias"));
  EXPECT_THAT(groups[2].parameters, ElementsAre("dec.weight"));
  EXPECT_FLOAT_EQ(groups[0].lr, lr / 2);
  EXPECT_FLOAT_EQ(groups[2].lr, lr / 20);
  EXPECT_FLOAT_EQ(groups[0].weight_decay, wd);
  EXPECT_FLOAT_EQ(groups[1].weight_decay, 0.f);
  EXPECT_FLOAT_EQ(groups[1].lr, lr / 2);
}

// The state saved with groups restores into an optimizer with the same groups and continues
// bit-identically; one with other groups, or none, is refused naming the difference.
TEST_P(ParamGroups, StateRoundTripsAndOtherGroupsAreRefused) {
  const MakeRule& make = GetParam().make;
  const auto grouped = [&make] {
    auto opt = make(0.1f, 0.05f);
    opt->add_param_group(optim::ParamGroup::one_dimensional().weight_decay(0.f));
    return opt;
  };
  auto model_a = make_bag({"enc.weight", "enc.bias", "dec.weight"});
  auto a = grouped();
  a->setup(*model_a);
  set_gradients(*model_a, 0);
  a->update();
  EXPECT_EQ(a->state_scalars().at("param_groups"), 1.0);
  EXPECT_EQ(a->state_scalars().at("param_group1/weight_decay"), 0.0);
  EXPECT_EQ(a->state_scalars().at("param_group1/lr_share"), -1.0);

  auto model_b = make_bag({"enc.weight", "enc.bias", "dec.weight"});
  Tensor params_b = model_b->arena().params();
  params_b.copy_(model_a->arena().params());
  auto b = grouped();
  b->setup(*model_b);
  b->load_state(a->state(), a->state_scalars());
  for (auto* m : {model_a.get(), model_b.get()}) set_gradients(*m, 1);
  a->update();
  b->update();
  EXPECT_EQ(model_a->arena().params().to_vector<float>(), model_b->arena().params().to_vector<float>());

  auto plain = make(0.1f, 0.05f);
  plain->setup(*model_b);
  EXPECT_THAT(error_message([&] { plain->load_state(a->state(), a->state_scalars()); }),
              HasSubstr("saved with 1 parameter group(s) besides the default one, but this optimizer has 0"));
  auto other = make(0.1f, 0.05f);
  other->add_param_group(optim::ParamGroup::one_dimensional().weight_decay(0.01f));
  other->setup(*model_b);
  EXPECT_THAT(error_message([&] { other->load_state(a->state(), a->state_scalars()); }),
              AllOf(HasSubstr("'param_group1/weight_decay' was saved as 0"), HasSubstr("this optimizer has 0.01")));
}

INSTANTIATE_TEST_SUITE_P(Rules, ParamGroups, ::testing::ValuesIn(rule_cases()),
                         [](const ::testing::TestParamInfo<RuleCase>& info) { return info.param.name; });

// Under MixedPrecision the wrapped rule runs on float32 masters, which keep the model's names:
// a group chosen by name still finds its parameter. AdamW with zero gradients only decays.
TEST(ParamGroupsMixedPrecision, NamedGroupsFindTheirParametersThroughTheMasters) {
  auto model = make_bag({"enc.weight", "enc.bias", "dec.weight"});
  Tensor params = model->arena().params();
  params.fill_(1.f);
  auto opt = optim::mixed_precision(std::make_unique<optim::AdamW>(optim::AdamWOptions(0.5f).weight_decay(1.f)),
                                    kBFloat16);
  opt->add_param_group(optim::ParamGroup::named({"enc.bias"}, "kept").weight_decay(0.f));
  opt->setup(*model);
  opt->zero_grad();
  opt->update();
  EXPECT_THAT(values_of(*model, "enc.bias"), ::testing::Each(1.f));
  EXPECT_THAT(values_of(*model, "enc.weight"), ::testing::Each(0.5f));
  EXPECT_THAT(values_of(*model, "dec.weight"), ::testing::Each(0.5f));
  const std::vector<optim::ParamGroupInfo> groups = opt->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[1].parameters, ElementsAre("enc.bias"));
}

// A schedule sets the optimizer's lr; every group keeps its share of it, through a wrapper too.
TEST(ParamGroupsSchedule, AScheduleMovesEveryGroupsLrByOneFactor) {
  auto model = make_bag({"enc.weight", "enc.bias", "dec.weight"});
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.2f), kFloat32);
  opt->add_param_group(optim::ParamGroup::one_dimensional().lr(0.05f));
  opt->setup(*model);
  const optim::StepDecay schedule(/*base=*/0.4, /*gamma=*/0.5, /*step_size=*/10);
  schedule.apply(*opt, 25);  // 0.4 * 0.5^2
  const std::vector<optim::ParamGroupInfo> groups = opt->param_groups();
  EXPECT_FLOAT_EQ(groups[0].lr, 0.1f);
  EXPECT_FLOAT_EQ(groups[1].lr, 0.025f);  // a quarter of the optimizer's, as when it was added
}

// A rule of one's own without step_values().
class PlainRule : public optim::Optimizer {
 public:
  float lr() const override { return 0.1f; }
  void set_lr(float) override {}

 protected:
  void step(nn::ParameterArena&) override {}
};

TEST(ParamGroupsRefusals, BadGroupsAreRefusedWithTheGroupAndTheModelsNames) {
  auto model = make_bag({"enc.weight", "enc.bias"});
  {
    optim::AdamW opt;
    opt.add_param_group(optim::ParamGroup::named({"enc.wieght"}, "typo").lr(1e-4f));
    EXPECT_THAT(error_message([&] { opt.setup(*model); }),
                AllOf(HasSubstr("group 'typo' names 'enc.wieght'"), HasSubstr("enc.weight, enc.bias")));
  }
  {
    optim::SGD opt(0.1f);
    opt.add_param_group(optim::ParamGroup([](const std::string& n, const Shape&) { return n == "dec.bias"; }, "none"));
    EXPECT_THAT(error_message([&] { opt.setup(*model); }),
                AllOf(HasSubstr("group 'none' selects no parameter"), HasSubstr("enc.weight, enc.bias")));
  }
  {
    // The first group takes every 1-D parameter, leaving none for the second.
    optim::SGD opt(0.1f);
    opt.setup(*model);
    opt.add_param_group(optim::ParamGroup::one_dimensional("first"));
    opt.add_param_group(optim::ParamGroup::named({"enc.bias"}, "second"));
    EXPECT_THAT(error_message([&] { opt.update(); }), HasSubstr("group 'second' selects no parameter"));
  }
  optim::SGD zero_lr(0.f);
  EXPECT_THAT(error_message([&] { zero_lr.add_param_group(optim::ParamGroup::one_dimensional().lr(0.1f)); }),
              HasSubstr("the optimizer's lr is 0"));
  optim::SGD sgd(0.1f);
  EXPECT_THAT(error_message([&] { sgd.add_param_group(optim::ParamGroup::one_dimensional("neg").weight_decay(-1.f)); }),
              HasSubstr("expected a finite weight_decay >= 0 for group 'neg', got -1"));
  EXPECT_THAT(error_message([&] { sgd.add_param_group(optim::ParamGroup(nullptr, "empty")); }),
              HasSubstr("group 'empty' has no predicate"));
  PlainRule own;
  EXPECT_THAT(error_message([&] { own.add_param_group(optim::ParamGroup::one_dimensional()); }),
              HasSubstr("must implement step_values()"));
}

}  // namespace
}  // namespace dpl::test
