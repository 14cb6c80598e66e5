// Snapshots of several runs in one output folder: each run prunes its own checkpoints only, and a
// resumed run continues (and prunes) the lineage of the checkpoint it resumed from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

// 20 samples in batches of 5: four iterations per epoch.
data::Dataset problem() {
  Generator gen(4);
  return data::Dataset(Tensor::uniform({20, 5}, 0.f, 1.f, gen), Tensor::zeros({20}, TensorOptions(kInt32)));
}

// One training run writing a snapshot every epoch into out, keeping the newest `keep` of its own.
struct TrainingRun {
  Generator init{1};
  nn::MLP model{8, 5, 3, init};
  optim::Adam opt;
  data::BatchIterator it{problem(), 5};
  train::StandardUpdater updater{it, opt, [this](const data::Batch& b, train::Observation&) {
                                   return softmax_cross_entropy(model(Variable(b.x)), b.y);
                                 }};
  train::Trainer trainer;
  TrainingRun(const std::string& out, std::int64_t epochs, std::int64_t keep)
      : trainer(updater, epochs, train::LengthUnit::kEpoch, nullptr, out) {
    opt.setup(model);
    trainer.extend(std::make_shared<train::extensions::Snapshot>("", keep), train::Trigger::epochs(1));
  }
};

std::vector<std::string> names(const test::TempDir& dir) {
  std::vector<std::string> out;
  for (const std::string& p : train::list_checkpoints(dir.path().string()))
    out.push_back(std::filesystem::path(p).filename().string());
  return out;
}

TEST(SnapshotRuns, TwoRunsSharingAFolderEachKeepTheirOwnSnapshots) {
  test::TempDir dir("dpl_snapshot_runs");
  TrainingRun first(dir.path().string(), 3, 1);
  first.trainer.run();
  EXPECT_EQ(names(dir), (std::vector<std::string>{"snapshot_iter_12.safetensors"}));

  // A shorter run into the same folder: its snapshots are at lower iterations than the first
  // run's, which pruning by iteration alone deleted as soon as they were written.
  TrainingRun second(dir.path().string(), 2, 1);
  ASSERT_NE(first.trainer.run_id(), second.trainer.run_id());
  second.trainer.run();
  EXPECT_EQ(names(dir), (std::vector<std::string>{"snapshot_iter_8.safetensors", "snapshot_iter_12.safetensors"}));
  EXPECT_EQ(train::checkpoint_run_id(dir.file("snapshot_iter_8.safetensors")), second.trainer.run_id());
  EXPECT_EQ(train::checkpoint_run_id(dir.file("snapshot_iter_12.safetensors")), first.trainer.run_id());
}

TEST(SnapshotRuns, AResumedRunPrunesItsOwnLineageAndNoOtherRunsFiles) {
  test::TempDir dir("dpl_snapshot_resume");
  TrainingRun first(dir.path().string(), 3, 1);
  first.trainer.run();
  TrainingRun other(dir.path().string(), 2, 1);
  other.trainer.run();

  // Continue the first run to 5 epochs: its snapshot at 12 is its own, pruned once 16 is written.
  TrainingRun resumed(dir.path().string(), 5, 1);
  resumed.trainer.resume(dir.file("snapshot_iter_12.safetensors"));
  EXPECT_EQ(resumed.trainer.run_id(), first.trainer.run_id());
  resumed.trainer.run();
  EXPECT_EQ(names(dir), (std::vector<std::string>{"snapshot_iter_8.safetensors", "snapshot_iter_20.safetensors"}));
  EXPECT_EQ(train::checkpoint_run_id(dir.file("snapshot_iter_20.safetensors")), first.trainer.run_id());
  EXPECT_EQ(train::checkpoint_run_id(dir.file("snapshot_iter_8.safetensors")), other.trainer.run_id());
}

TEST(SnapshotRuns, PruningNeedsARunIdAndLeavesFilesWithoutOne) {
  test::TempDir dir("dpl_snapshot_prune");
  DPL_EXPECT_ERROR(train::remove_old_checkpoints(dir.path().string(), 1, ""),
                   HasSubstr("expected the run id whose checkpoints to prune, got none"));
  // A file named like a checkpoint that is none (or one written before run ids) is not a run's.
  for (const char* name : {"snapshot_iter_1.safetensors", "snapshot_iter_2.safetensors"}) {
    std::FILE* f = std::fopen(dir.file(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("not a checkpoint", f);
    std::fclose(f);
  }
  EXPECT_EQ(train::checkpoint_run_id(dir.file("snapshot_iter_1.safetensors")), "");
  train::remove_old_checkpoints(dir.path().string(), 1, train::new_run_id());
  EXPECT_EQ(names(dir).size(), 2u);
}

}  // namespace
