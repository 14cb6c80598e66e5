// The StandardUpdater: one iteration from a batch source, what it observes, and what the static
// types of its source and optimizer let a Trainer do with them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/random_dataset.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

Variable mlp_loss(nn::Module& model, const data::Batch& b) { return softmax_cross_entropy(model(Variable(b.x)), b.y); }

// A small model with its optimizer, set up, and an iterator of 4 batches per epoch.
struct Learner {
  Generator gen{1};
  nn::MLP model{8, 5, 3, gen};
  optim::SGD opt{0.1f};
  data::BatchIterator it{test::random_dataset(20, 4), 5};
  Learner() { opt.setup(model); }
  train::LossFunction loss() {
    return [this](const data::Batch& b, train::Observation&) { return mlp_loss(model, b); };
  }
};

TEST(StandardUpdater, OneUpdateIsOneBatchAndItsLoss) {
  Learner l;
  data::BatchIterator& it = l.it;
  optim::SGD& opt = l.opt;
  train::StandardUpdater updater(it, opt, l.loss());
  EXPECT_EQ(&updater.iterator(), &it);
  EXPECT_EQ(&updater.optimizer(), &opt);
  EXPECT_EQ(updater.device(), Device::cpu());
  train::Observation observation;
  updater.update(observation);
  updater.update(observation);
  EXPECT_EQ(it.iteration(), 2);
  EXPECT_EQ(opt.t(), 2);
  EXPECT_EQ(updater.updates(), 2);
  EXPECT_GE(updater.update_seconds(), updater.data_seconds());
  const auto means = observation.take_means();
  ASSERT_EQ(means.size(), 1u);
  EXPECT_EQ(means[0].first, "main/loss");
  EXPECT_GT(means[0].second, 0.0);
  DPL_EXPECT_ERROR(train::StandardUpdater(it, opt, nullptr), HasSubstr("expected a loss function, got an empty one"));
}

// What a checkpoint or a phase timer can use is decided by the types the updater was given,
// not asked of the objects at run time.
TEST(StandardUpdater, KnowsItsSourceAndOptimizerByTheirStaticTypes) {
  Learner l;
  data::BatchIterator& it = l.it;
  optim::SGD& opt = l.opt;
  const train::LossFunction loss = l.loss();
  const train::StandardUpdater as_iterator(it, opt, loss);
  EXPECT_EQ(as_iterator.batch_iterator(), &it);
  EXPECT_EQ(as_iterator.multi_node_optimizer(), nullptr);
  data::BatchSource& source = it;
  const train::StandardUpdater as_source(source, opt, loss);
  EXPECT_EQ(as_source.batch_iterator(), nullptr);
  EXPECT_EQ(&as_source.iterator(), &it);
}

// Under kSkip it observes "main/skipped_steps" (whose mean is the fraction of skipped steps);
// under kStop the error leaves update() with the iteration.
TEST(StandardUpdater, ReportsSkippedStepsOrStops) {
  constexpr std::int64_t kIn = 6, kUnits = 8, kOut = 3, kBatch = 10;
  // Three batches of kBatch rows, in order; one input of the second is NaN, as a corrupt sample
  // would be.
  Generator data_gen(5);
  Tensor x = Tensor::normal({3 * kBatch, kIn}, 0.f, 1.f, data_gen), y = Tensor::empty({3 * kBatch}, kInt32);
  for (std::int64_t i = 0; i < 3 * kBatch; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(i % kOut));
  x.set<float>({kBatch + 4, 2}, std::numeric_limits<float>::quiet_NaN());
  const data::Dataset set(x, y);
  for (auto policy : {optim::NonFinitePolicy::kSkip, optim::NonFinitePolicy::kStop}) {
    SCOPED_TRACE(optim::to_string(policy));
    Generator gen(9);
    nn::MLP model(kUnits, kIn, kOut, gen);
    optim::SGD opt(0.1f);
    opt.set_non_finite_policy(policy);
    opt.setup(model);
    data::BatchIterator batches(set, kBatch, false);
    train::StandardUpdater updater(batches, opt, [&](const data::Batch& b, train::Observation&) {
      return mlp_loss(model, b);
    });
    train::Observation observation;
    updater.update(observation);
    if (policy == optim::NonFinitePolicy::kStop) {
      DPL_EXPECT_ERROR(updater.update(observation), HasSubstr("iteration 2: non-finite gradient"));
      continue;
    }
    updater.update(observation);
    updater.update(observation);
    double skipped = -1.0;
    for (const auto& [key, mean] : observation.take_means())
      if (key == "main/skipped_steps") skipped = mean;
    EXPECT_DOUBLE_EQ(skipped, 1.0 / 3.0);
    EXPECT_EQ(opt.t(), 2);
  }
}

}  // namespace
