// Options structs of the update rules (include/dpl/optim/optimizer.hpp): each setting reaches the
// optimizer, the defaults are the positional constructors', training is bit-identical to the
// positional spelling, and bad values are refused as the positional constructors refuse them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;

// Three steps of opt on a small MLP; the parameters after.
std::vector<float> train(optim::Optimizer& opt) {
  Generator gen(3);
  nn::MLP model(6, 4, 3, gen);
  opt.setup(model);
  const Tensor x = Tensor::normal({5, 4}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({5}, kInt32);
  for (std::int64_t i = 0; i < 5; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(i % 3));
  for (int step = 0; step < 3; ++step) opt.update([&] { return softmax_cross_entropy(model(Variable(x)), y); });
  return model.arena().params().to_vector<float>();
}

TEST(OptimizerOptions, SGDTakesEverySetting) {
  optim::SGD sgd(optim::SGDOptions().lr(0.2f).weight_decay(1e-3f));
  EXPECT_EQ(sgd.lr(), 0.2f);
  EXPECT_EQ(sgd.weight_decay(), 1e-3f);
  EXPECT_EQ(optim::SGD(optim::SGDOptions()).lr(), optim::SGD().lr());
  EXPECT_EQ(optim::SGDOptions(0.3f).lr(), 0.3f);

  optim::SGD positional(0.2f);
  positional.set_weight_decay(1e-3f);
  EXPECT_EQ(train(sgd), train(positional));
}

TEST(OptimizerOptions, MomentumSGDTakesEverySetting) {
  optim::MomentumSGD opt(optim::MomentumSGDOptions(0.05f).momentum(0.8f).weight_decay(1e-4f));
  EXPECT_EQ(opt.lr(), 0.05f);
  EXPECT_EQ(opt.momentum(), 0.8f);
  EXPECT_EQ(opt.weight_decay(), 1e-4f);
  const optim::MomentumSGD defaults{optim::MomentumSGDOptions()};
  EXPECT_EQ(defaults.lr(), optim::MomentumSGD().lr());
  EXPECT_EQ(defaults.momentum(), optim::MomentumSGD().momentum());
  EXPECT_EQ(defaults.weight_decay(), 0.f);

  optim::MomentumSGD positional(0.05f, 0.8f);
  positional.set_weight_decay(1e-4f);
  EXPECT_EQ(train(opt), train(positional));
}

TEST(OptimizerOptions, AdamTakesEverySetting) {
  optim::Adam adam(optim::AdamOptions().lr(1e-2f).betas(0.8f, 0.99f).eps(1e-6f).weight_decay(1e-3f));
  EXPECT_EQ(adam.lr(), 1e-2f);
  EXPECT_EQ(adam.beta1(), 0.8f);
  EXPECT_EQ(adam.beta2(), 0.99f);
  EXPECT_EQ(adam.eps(), 1e-6f);
  EXPECT_EQ(adam.weight_decay(), 1e-3f);
  const optim::AdamOptions defaults;
  const optim::Adam positional_defaults;
  EXPECT_EQ(defaults.lr(), positional_defaults.lr());
  EXPECT_EQ(defaults.betas().first, positional_defaults.beta1());
  EXPECT_EQ(defaults.betas().second, positional_defaults.beta2());
  EXPECT_EQ(defaults.eps(), positional_defaults.eps());
  EXPECT_EQ(defaults.weight_decay(), 0.f);

  optim::Adam positional(1e-2f, 0.8f, 0.99f, 1e-6f);
  positional.set_weight_decay(1e-3f);
  EXPECT_EQ(train(adam), train(positional));
}

TEST(OptimizerOptions, BadValuesAreRefusedAsByThePositionalConstructors) {
  DPL_EXPECT_ERROR(optim::SGD(optim::SGDOptions(-1.f)), HasSubstr("SGD: expected a finite learning rate >= 0, got -1"));
  DPL_EXPECT_ERROR(optim::SGD(optim::SGDOptions().weight_decay(-1.f)),
                   HasSubstr("expected a finite rate >= 0, got -1"));
  DPL_EXPECT_ERROR(optim::MomentumSGD(optim::MomentumSGDOptions().momentum(1.f)),
                   HasSubstr("MomentumSGD: expected momentum in [0, 1), got 1"));
  DPL_EXPECT_ERROR(optim::Adam(optim::AdamOptions().betas(0.9f, 1.f)),
                   HasSubstr("Adam: expected beta1 and beta2 in [0, 1), got beta1=0.9 beta2=1"));
  DPL_EXPECT_ERROR(optim::Adam(optim::AdamOptions().eps(0.f)), HasSubstr("Adam: expected eps > 0, got 0"));
}

}  // namespace
}  // namespace dpl
