// The Trainer: its options, what it creates on disk, the loop with its extensions, and which
// sources it can checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
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
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(Trainer, ReportsEpochsAndSetsTheScheduledRate) {
  test::TempDir dir("dpl_trainer");
  Generator init(1);
  nn::MLP model(8, 5, 3, init);
  optim::SGD opt(0.1f);
  opt.setup(model);
  data::BatchIterator it(test::random_dataset(20, 4), 5);  // 4 iterations per epoch
  train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation& observation) {
    const Variable logits = model(Variable(b.x));
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y);
  });
  std::ostringstream table;
  train::Trainer trainer(updater, 2, train::LengthUnit::kEpoch, nullptr, dir.path().string());
  trainer.extend(std::make_shared<train::extensions::LrScheduler>(optim::StepDecay(0.1, 0.5, 4)));
  trainer.extend(std::make_shared<train::extensions::Evaluator>(test::random_dataset(20, 4), 7));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.extend(std::make_shared<train::extensions::PrintReport>(
      std::vector<std::string>{"epoch", "main/loss", "validation/main/accuracy", "lr"}, table));
  DPL_EXPECT_ERROR(trainer.extend(std::make_shared<train::extensions::LogReport>()),
                   HasSubstr("an extension named 'LogReport' is already there"));
  trainer.run();

  const train::TrainingLog* log = trainer.find<train::extensions::LogReport>()->log();
  ASSERT_EQ(log->log().size(), 2u);
  EXPECT_EQ(log->log()[1].iteration, 8);
  EXPECT_FLOAT_EQ(static_cast<float>(*log->log()[0].get("lr")), 0.1f);
  EXPECT_FLOAT_EQ(static_cast<float>(*log->log()[1].get("lr")), 0.05f);
  EXPECT_TRUE(log->log()[1].get("validation/main/accuracy").has_value());
  EXPECT_TRUE(log->log()[1].get("main/accuracy").has_value());
  EXPECT_EQ(log->log()[0].values.front().first, "main/loss");  // first, as Chainer orders it
  EXPECT_TRUE(std::filesystem::exists(dir.file("log")));
  EXPECT_NE(table.str().find("epoch       main/loss"), std::string::npos) << table.str();
  EXPECT_EQ(opt.t(), 8);
}

// A source whose position no checkpoint can hold: the problem's batches through a wrapper.
class WrappedSource : public data::BatchSource {
 public:
  data::Batch next() override { return it_.next(); }
  std::int64_t epoch() const override { return it_.epoch(); }
  std::int64_t iteration() const override { return it_.iteration(); }
  bool is_new_epoch() const override { return it_.is_new_epoch(); }
  double epoch_detail() const override { return it_.epoch_detail(); }
  std::int64_t batches_per_epoch() const override { return it_.batches_per_epoch(); }

 private:
  data::BatchIterator it_{test::random_dataset(20, 4), 5};
};

// A model with its optimizer, set up.
struct SmallMlp {
  Generator init{1};
  nn::MLP model{8, 5, 3, init};
  optim::SGD opt{0.1f};
  SmallMlp() { opt.setup(model); }
  Variable loss(const data::Batch& b) { return softmax_cross_entropy(model(Variable(b.x)), b.y); }
};

TEST(Trainer, TrainsFromAnyBatchSourceButCheckpointsOnlyOneWithAPosition) {
  test::TempDir dir("dpl_trainer_source");
  SmallMlp learner;
  WrappedSource source;  // 4 iterations per epoch
  train::StandardUpdater updater(source, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer trainer(updater, 2, train::LengthUnit::kEpoch, nullptr, dir.path().string());
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.run();
  const train::TrainingLog* log = trainer.find<train::extensions::LogReport>()->log();
  ASSERT_EQ(log->log().size(), 2u);  // the epochs come from the source's own counters
  EXPECT_EQ(log->log()[1].iteration, 8);
  const std::string path = (dir.path() / "refused.safetensors").string();
  DPL_EXPECT_ERROR(trainer.save(path), HasSubstr("Trainer::save: expected the updater to draw from a data::BatchIterator or a data::GlobalBatchSource"));
  EXPECT_FALSE(std::filesystem::exists(path));
  DPL_EXPECT_ERROR(trainer.resume(path), HasSubstr("Trainer::resume: expected the updater to draw from a data::BatchIterator or a data::GlobalBatchSource"));
}

TEST(TrainerOptions, DefaultsAreOneEpochOneProcessAndChainersFolder) {
  const train::TrainerOptions defaults;
  EXPECT_EQ(defaults.length(), 1);
  EXPECT_EQ(defaults.unit(), train::LengthUnit::kEpoch);
  EXPECT_EQ(defaults.communicator(), nullptr);
  EXPECT_EQ(defaults.out(), "result");

  const train::TrainerOptions set = train::TrainerOptions().stop(300, train::LengthUnit::kIteration).out("");
  EXPECT_EQ(set.length(), 300);
  EXPECT_EQ(set.unit(), train::LengthUnit::kIteration);
  EXPECT_EQ(set.out(), "");
  const train::TrainerOptions constructed(20, train::LengthUnit::kIteration);
  EXPECT_EQ(constructed.length(), 20);
  EXPECT_EQ(constructed.unit(), train::LengthUnit::kIteration);
}

TEST(TrainerOptions, TheTrainerRunsAsTheyDescribe) {
  SmallMlp learner;
  data::BatchIterator it(test::random_dataset(20, 4), 5);  // 4 iterations per epoch
  train::StandardUpdater updater(it, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer trainer(updater, train::TrainerOptions().stop(6, train::LengthUnit::kIteration).out(""));
  EXPECT_EQ(trainer.length(), 6);
  EXPECT_EQ(trainer.unit(), train::LengthUnit::kIteration);
  EXPECT_EQ(trainer.out(), "");
  EXPECT_EQ(trainer.communicator(), nullptr);
  EXPECT_TRUE(trainer.is_root());
  EXPECT_FALSE(trainer.done());
  trainer.run();
  EXPECT_TRUE(trainer.done());
  EXPECT_EQ(it.iteration(), 6);
  EXPECT_EQ(learner.opt.t(), 6);

  // The positional constructor says the same in a different order.
  data::BatchIterator again(test::random_dataset(20, 4), 5);
  train::StandardUpdater second(again, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer positional(second, 2, train::LengthUnit::kEpoch, nullptr, "");
  positional.run();
  EXPECT_EQ(again.iteration(), 8);

  DPL_EXPECT_ERROR(train::Trainer(updater, train::TrainerOptions(0)), HasSubstr("expected a training length >= 1, got 0"));
}

// Records whether the output folder exists when training starts.
class FolderWitness : public train::Extension {
 public:
  std::string name() const override { return "FolderWitness"; }
  void initialize(train::Trainer& trainer) override { existed = fs::is_directory(trainer.out()); }
  bool existed = false;
};

TEST(Trainer, ATrainerThatWritesNothingCreatesNoFolder) {
  test::TempDir dir("dpl_trainer_nothing");
  const fs::path out = dir.path() / "result";
  SmallMlp learner;
  data::BatchIterator it(test::random_dataset(20, 4), 5);
  train::StandardUpdater updater(it, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  std::ostringstream printed;
  train::Trainer trainer(updater, train::TrainerOptions(2, train::LengthUnit::kEpoch).out(out.string()));
  trainer.extend(std::make_shared<train::extensions::Evaluator>(test::random_dataset(20, 4), 7));
  trainer.extend(std::make_shared<train::extensions::LrScheduler>(optim::StepDecay(0.1, 0.5, 4)));
  trainer.extend(std::make_shared<train::extensions::ProgressBar>(train::ProgressBarOptions{}, printed));
  // Without a MultiNodeOptimizer the phase summary prints the throughput and writes no file.
  trainer.extend(std::make_shared<train::extensions::PhaseSummary>(1, printed));
  auto witness = std::make_shared<FolderWitness>();
  trainer.extend(witness);
  trainer.run();
  EXPECT_EQ(learner.opt.t(), 8);
  EXPECT_NE(printed.str().find("training: 8 iterations"), std::string::npos) << printed.str();
  EXPECT_FALSE(witness->existed);
  EXPECT_FALSE(fs::exists(out));
}

TEST(Trainer, CreatesItsFolderWhenRunStartsIfAnExtensionWritesThere) {
  test::TempDir dir("dpl_trainer_folder");
  const fs::path out = dir.path() / "nested" / "result";
  SmallMlp learner;
  data::BatchIterator it(test::random_dataset(20, 4), 5);
  train::StandardUpdater updater(it, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer trainer(updater, train::TrainerOptions(1, train::LengthUnit::kEpoch).out(out.string()));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  auto witness = std::make_shared<FolderWitness>();
  trainer.extend(witness);
  EXPECT_FALSE(fs::exists(out));  // construction and extend() create nothing
  trainer.run();
  EXPECT_TRUE(witness->existed);  // before the first update, not at the first log write
  EXPECT_TRUE(fs::exists(out / "log"));
  EXPECT_FALSE(fs::exists(out / ".write-probe"));
}

TEST(Trainer, AnUnwritableFolderFailsBeforeTheFirstUpdate) {
  test::TempDir dir("dpl_trainer_unwritable");
  const fs::path file = dir.path() / "in_the_way";
  std::ofstream(file) << "x";
  SmallMlp learner;
  data::BatchIterator it(test::random_dataset(20, 4), 5);
  train::StandardUpdater updater(it, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer trainer(updater, train::TrainerOptions(1).out((file / "result").string()));
  trainer.extend(std::make_shared<train::extensions::Snapshot>());  // writes into out
  DPL_EXPECT_ERROR(trainer.run(), AllOf(HasSubstr("Trainer"), HasSubstr("cannot create the output folder")));
  EXPECT_EQ(updater.updates(), 0);
}

}  // namespace
