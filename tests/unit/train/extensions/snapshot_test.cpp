// The Snapshot extension: checkpoints on a trigger, only the newest ones kept.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/random_dataset.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

TEST(Snapshot, KeepsTheNewestOnes) {
  test::TempDir dir("dpl_snapshots");
  Generator init(1);
  nn::MLP model(8, 5, 3, init);
  optim::Adam opt;
  opt.setup(model);
  data::BatchIterator it(test::random_dataset(20, 4), 5);
  train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, train::TrainerOptions(7, train::LengthUnit::kIteration).out(dir.path().string()));
  trainer.extend(std::make_shared<train::extensions::Snapshot>("", 2), train::Trigger::iterations(2));
  trainer.run();
  std::vector<std::string> names;
  for (const std::string& p : train::list_checkpoints(dir.path().string()))
    names.push_back(std::filesystem::path(p).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"snapshot_iter_4.safetensors", "snapshot_iter_6.safetensors"}));
  DPL_EXPECT_ERROR(train::remove_old_checkpoints(dir.path().string(), 0, train::new_run_id()), HasSubstr("expected keep >= 1, got 0"));
}

TEST(Snapshot, RefusesToKeepNone) {
  DPL_EXPECT_ERROR(train::extensions::Snapshot("", 0), HasSubstr("expected to keep >= 1 checkpoints, got 0"));
}

}  // namespace
