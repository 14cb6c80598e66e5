// Value triggers (the best so far, early stopping), the defaults that make short runs evaluate and
// log, and the model kept by SaveModel or loaded from a checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/random_dataset.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Observes script[i] as "score" before update i + 1, so iteration i + 1's log entry holds it.
class ScriptedScore : public train::Extension {
 public:
  explicit ScriptedScore(std::vector<double> script) : script_(std::move(script)) {}
  std::string name() const override { return "ScriptedScore"; }
  void before_update(train::Trainer& trainer) override {
    const auto i = static_cast<std::size_t>(trainer.updater().iterator().iteration());
    trainer.observation().observe("score", script_.at(i));
  }

 private:
  std::vector<double> script_;
};

// Records the iterations it ran at.
class Recorder : public train::Extension {
 public:
  explicit Recorder(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void operator()(train::Trainer& trainer) override { fired.push_back(trainer.updater().iterator().iteration()); }
  std::vector<std::int64_t> fired;

 private:
  std::string name_;
};

// A model with its optimizer and data (4 iterations per epoch), ready for a trainer.
struct Learner {
  Generator init{1};
  nn::MLP model{8, 5, 3, init};
  optim::SGD opt{0.1f};
  data::BatchIterator it{test::random_dataset(20, 4), 5};
  train::StandardUpdater updater{it, opt, [this](const data::Batch& b, train::Observation&) {
                                   return softmax_cross_entropy(model(Variable(b.x)), b.y);
                                 }};
  Learner() { opt.setup(model); }
};

TEST(ValueTriggers, BestFiresWhenTheLogGetsABetterValueThanEveryEarlierEntry) {
  for (const train::Goal goal : {train::Goal::kMinimize, train::Goal::kMaximize}) {
    Learner s;
    train::Trainer trainer(s.updater, train::TrainerOptions(6, train::LengthUnit::kIteration).out(""));
    trainer.extend(std::make_shared<ScriptedScore>(std::vector<double>{5, 3, 4, 2, 2, 6}));
    trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(1));
    auto best = std::make_shared<Recorder>("best");
    trainer.extend(best, train::Trigger::best("score", goal));
    trainer.run();
    if (goal == train::Goal::kMinimize) {
      EXPECT_THAT(best->fired, ElementsAre(1, 2, 4));  // 2 at iteration 5 ties, so is not better
    } else {
      EXPECT_THAT(best->fired, ElementsAre(1, 6));
    }
  }
}

TEST(ValueTriggers, BestNeedsALogReportAndTheKeyInItsEntries) {
  Learner s;
  train::Trainer trainer(s.updater, train::TrainerOptions(4, train::LengthUnit::kIteration).out(""));
  trainer.extend(std::make_shared<Recorder>("best"), train::Trigger::best("validation/main/loss", train::Goal::kMinimize));
  DPL_EXPECT_ERROR(trainer.run(), HasSubstr("Trigger::best('validation/main/loss') of best: expected a LogReport "
                                            "extension in the trainer"));
  EXPECT_EQ(s.it.iteration(), 0);  // refused before the first update

  trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(2));
  DPL_EXPECT_ERROR(trainer.run(), HasSubstr("expected a value 'validation/main/loss' in the log entry of "
                                            "iteration 2, which has 'main/loss'"));
  DPL_EXPECT_ERROR(train::Trigger::best("", train::Goal::kMinimize), HasSubstr("got an empty one"));
}

TEST(ValueTriggers, EarlyStoppingEndsTheRunAfterPatienceEntriesWithoutImprovement) {
  Learner s;
  train::Trainer trainer(s.updater,
                         train::TrainerOptions(100, train::LengthUnit::kIteration).out("").stop_early(
                             "score", train::Goal::kMinimize, 3));
  trainer.extend(std::make_shared<ScriptedScore>(std::vector<double>{5, 3, 4, 4, 4, 1, 0, 0}));
  trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(1));
  trainer.run();
  EXPECT_EQ(s.it.iteration(), 5);  // 4, 4, 4 after the best 3
  EXPECT_TRUE(trainer.stopped_early());
  EXPECT_TRUE(trainer.done());

  Learner t;
  train::Trainer without_log(t.updater, train::TrainerOptions(3, train::LengthUnit::kIteration).out("").stop_early(
                                            "score", train::Goal::kMinimize, 2));
  DPL_EXPECT_ERROR(without_log.run(), HasSubstr("Trainer (early stopping on 'score'): expected a LogReport"));
  DPL_EXPECT_ERROR(train::Trainer(t.updater, train::TrainerOptions().stop_early("score", train::Goal::kMinimize, 0)),
                   HasSubstr("expected an early-stopping patience >= 1 (entries), got 0"));
}

TEST(ValueTriggers, ARunShorterThanAnEpochStillEvaluatesAndLogsOnce) {
  Learner s;
  train::Trainer trainer(s.updater, train::TrainerOptions(3, train::LengthUnit::kIteration).out(""));
  trainer.extend(std::make_shared<train::extensions::Evaluator>(test::random_dataset(12, 4), 4));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.run();
  const auto& log = trainer.find<train::extensions::LogReport>()->log()->log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].iteration, 3);
  EXPECT_TRUE(log[0].get("validation/main/accuracy").has_value());

  // A run that ends on an epoch boundary gets no second entry for it.
  Learner whole;
  train::Trainer epochs(whole.updater, train::TrainerOptions(2, train::LengthUnit::kEpoch).out(""));
  epochs.extend(std::make_shared<train::extensions::LogReport>());
  epochs.run();
  EXPECT_EQ(epochs.find<train::extensions::LogReport>()->log()->log().size(), 2u);
}

TEST(SaveModel, KeepsTheBestModelWhichLoadsAsWeights) {
  test::TempDir dir("dpl_save_model");
  Learner s;
  train::Trainer trainer(s.updater, train::TrainerOptions(6, train::LengthUnit::kIteration).out(dir.path().string()));
  trainer.extend(std::make_shared<ScriptedScore>(std::vector<double>{5, 3, 4, 2, 7, 8}));
  trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(1));
  // The weights after iteration 4 (the best score), captured by an extension that runs with it.
  std::vector<float> at_best;
  class Capture : public train::Extension {
   public:
    Capture(nn::Module& m, std::vector<float>& into) : m_(m), into_(into) {}
    std::string name() const override { return "Capture"; }
    void operator()(train::Trainer&) override { into_ = m_.named_parameters()[0].second.data().to_vector<float>(); }

   private:
    nn::Module& m_;
    std::vector<float>& into_;
  };
  trainer.extend(std::make_shared<train::extensions::SaveModel>("best.safetensors"),
                 train::Trigger::best("score", train::Goal::kMinimize));
  trainer.extend(std::make_shared<Capture>(s.model, at_best), train::Trigger::best("score", train::Goal::kMinimize));
  trainer.run();

  Generator other(9);
  nn::MLP fresh(8, 5, 3, other);
  serialize::load_weights(fresh, dir.file("best.safetensors"));
  EXPECT_EQ(fresh.named_parameters()[0].second.data().to_vector<float>(), at_best);
  EXPECT_NE(s.model.named_parameters()[0].second.data().to_vector<float>(), at_best);  // trained on after it
  DPL_EXPECT_ERROR(train::extensions::SaveModel(""), HasSubstr("expected a file name, got an empty one"));
}

TEST(LoadModelFromCheckpoint, LoadsTheModelAndLoadWeightsSaysTheFileIsACheckpoint) {
  test::TempDir dir("dpl_model_from_checkpoint");
  Learner s;
  train::Trainer trainer(s.updater, train::TrainerOptions(3, train::LengthUnit::kIteration).out(""));
  trainer.run();
  const std::string checkpoint = dir.file("snapshot.safetensors");
  trainer.save(checkpoint);

  Generator other(9);
  nn::MLP fresh(8, 5, 3, other);
  DPL_EXPECT_ERROR(serialize::load_weights(fresh, checkpoint),
                   HasSubstr("it is a training checkpoint, whose model tensors are named 'model/<name>'"));
  train::load_model_from_checkpoint(fresh, checkpoint);
  for (std::size_t i = 0; i < fresh.named_parameters().size(); ++i)
    EXPECT_EQ(fresh.named_parameters()[i].second.data().to_vector<float>(),
              s.model.named_parameters()[i].second.data().to_vector<float>());
  EXPECT_EQ(train::checkpoint_model_tensors(checkpoint).front().first, "l1.weight");

  const std::string weights = dir.file("weights.safetensors");
  serialize::save_weights(fresh, weights);
  DPL_EXPECT_ERROR(train::checkpoint_model_tensors(weights), HasSubstr("is not a dpl checkpoint"));
  nn::MLP smaller(8, 4, 3, other);
  DPL_EXPECT_ERROR(train::load_model_from_checkpoint(smaller, checkpoint), HasSubstr("(its model) does not fit"));
}

}  // namespace
