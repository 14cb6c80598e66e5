// Under NonFinitePolicy::kSkip a run shows its skipped steps and fails above its allowed share;
// a non-finite validation loss stops the run unless checks are off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/random_dataset.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Ten steps (two epochs of five) whose loss is NaN, and so its gradients, in the first `bad` steps.
struct SkippingRun {
  Generator init{1};
  nn::MLP model{8, 5, 3, init};
  optim::SGD opt{0.1f};
  data::BatchIterator it{test::random_dataset(25, 4), 5};
  std::int64_t bad;
  train::StandardUpdater updater{it, opt, [this](const data::Batch& b, train::Observation&) {
                                   const Variable loss = softmax_cross_entropy(model(Variable(b.x)), b.y);
                                   return it.iteration() <= bad ? affine(loss, kNaN, 0.f) : loss;
                                 }};
  explicit SkippingRun(std::int64_t bad_steps) : bad(bad_steps) {
    opt.setup(model);
    opt.set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  }
};

TEST(NonFinite, ASkippingRunFailsAboveItsShareAndShowsItsSkips) {
  SkippingRun all(10);
  std::ostringstream table;
  train::Trainer trainer(all.updater, train::TrainerOptions(2, train::LengthUnit::kEpoch).out(""));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.extend(std::make_shared<train::extensions::PrintReport>(train::ReportTable::default_entries(), table));
  DPL_EXPECT_ERROR(trainer.run(), HasSubstr("Trainer: 10 of the run's 10 steps (100%) were skipped for non-finite "
                                            "gradients, more than the allowed share 0.5"));
  EXPECT_THAT(table.str(), HasSubstr("main/skipped_steps"));
  EXPECT_EQ(*trainer.find<train::extensions::LogReport>()->log()->log().back().get("main/skipped_steps"), 1.0);

  SkippingRun some(4);  // 4 of 10: within the default share
  train::Trainer fine(some.updater, train::TrainerOptions(2, train::LengthUnit::kEpoch).out(""));
  fine.run();
  EXPECT_EQ(some.updater.skipped_updates(), 4);

  SkippingRun allowed(10);
  train::Trainer lenient(allowed.updater,
                         train::TrainerOptions(2, train::LengthUnit::kEpoch).out("").max_skipped_share(1.0));
  lenient.run();
  DPL_EXPECT_ERROR(train::Trainer(allowed.updater, train::TrainerOptions().max_skipped_share(1.5)),
                   HasSubstr("expected a max_skipped_share in [0, 1], got 1.5"));
}

TEST(NonFinite, ANonFiniteValidationLossStopsTheRun) {
  for (const auto policy : {optim::NonFinitePolicy::kStop, optim::NonFinitePolicy::kOff}) {
    Generator init(1);
    nn::MLP model(8, 5, 3, init);
    optim::SGD opt(0.1f);
    opt.setup(model);
    opt.set_non_finite_policy(policy);
    data::BatchIterator it(test::random_dataset(10, 4), 5);
    train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation&) {
      return softmax_cross_entropy(model(Variable(b.x)), b.y);
    });
    data::Dataset poisoned = test::random_dataset(6, 4);
    Tensor x = poisoned.images();
    x.fill_(kNaN);
    train::Trainer trainer(updater, train::TrainerOptions(1, train::LengthUnit::kEpoch).out(""));
    trainer.extend(std::make_shared<train::extensions::Evaluator>(poisoned, 3));
    trainer.extend(std::make_shared<train::extensions::LogReport>());
    if (policy == optim::NonFinitePolicy::kStop) {
      DPL_EXPECT_ERROR(trainer.run(), HasSubstr("Evaluator: validation/main/loss is nan over 6 samples at iteration 2"));
    } else {
      trainer.run();
      EXPECT_TRUE(std::isnan(*trainer.find<train::extensions::LogReport>()->log()->log().back().get(
          "validation/main/loss")));
    }
  }
}

}  // namespace
