// Checkpoints in one process: what they restore, how damaged or foreign files are refused, and
// which snapshots are kept.
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
#include "dpl/serialize.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;

data::Dataset problem() {
  Generator gen(4);
  const Tensor x = Tensor::normal({20, 5}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({20}, kInt32);
  for (std::int64_t i = 0; i < 20; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(3)));
  return data::Dataset(x, y);
}

// A model, its optimizer, iterator, a generator and a log, trained for a few steps.
struct Replica {
  Generator init;
  nn::MLP model;
  optim::Adam opt{0.01f};
  data::BatchIterator it;
  Generator noise{11};
  train::LogReport log{""};
  explicit Replica(std::uint64_t seed, std::int64_t units = 8)
      : init(seed), model(units, 5, 3, init), it(problem(), 6, true, seed) {
    opt.setup(model);
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) {
      const data::Batch b = it.next();
      const Variable loss = opt.update([&] { return softmax_cross_entropy(model(Variable(b.x)), b.y); });
      noise.next_u64();
      log.observe("main/loss", loss.item());
      if (it.is_new_epoch()) log.end_epoch(it.epoch(), it.iteration());
    }
  }
  train::TrainingState state() {
    train::TrainingState s;
    s.model = &model;
    s.optimizer = &opt;
    s.iterator = &it;
    s.generators = {{"noise", &noise}};
    s.log = &log;
    return s;
  }
};

TEST(Checkpoint, ResumedRunMatchesTheUninterruptedOneBitForBit) {
  test::TempDir dir("dpl_checkpoint");
  Replica straight(1);
  straight.steps(9);

  Replica first(1);
  first.steps(3);  // mid-epoch: 18 of 20 samples served
  train::TrainingState saved = first.state();
  saved.values = {{"note", "three steps"}};
  train::save_checkpoint(dir.file("c.safetensors"), saved);

  Replica resumed(2);  // other initial weights, order and generator: all replaced
  train::TrainingState state = resumed.state();
  train::load_checkpoint(dir.file("c.safetensors"), state);
  EXPECT_EQ(state.values.at("note"), "three steps");
  EXPECT_EQ(resumed.it.iteration(), 3);
  EXPECT_EQ(resumed.log.pending().size(), 1u);
  resumed.steps(6);

  EXPECT_EQ(resumed.model.arena().params().to_vector<float>(), straight.model.arena().params().to_vector<float>());
  EXPECT_EQ(resumed.opt.state_scalars(), straight.opt.state_scalars());
  EXPECT_EQ(resumed.noise.next_u64(), straight.noise.next_u64());
  ASSERT_EQ(resumed.log.log().size(), straight.log.log().size());
  EXPECT_EQ(*resumed.log.log().back().get("main/loss"), *straight.log.log().back().get("main/loss"));

  // The file is plain safetensors, under the documented names.
  const serialize::SafetensorsFile file = serialize::load_safetensors(dir.file("c.safetensors"));
  for (const char* name : {"model/l1.weight", "optimizer/m", "optimizer/v", "rank0/iterator/order",
                           "rank0/iterator/generator", "rank0/iterator/counters", "rank0/generator/noise"})
    EXPECT_TRUE(file.contains(name)) << name;
  EXPECT_EQ(file.metadata.at("format"), train::kCheckpointFormat);
  EXPECT_EQ(file.metadata.at("ranks"), "1");
}

// The byte offset of a tensor's data in a safetensors file.
std::size_t data_offset(const std::string& path, const std::string& name) {
  std::ifstream f(path, std::ios::binary);
  std::uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const std::size_t at = header.find("\"" + name + "\"");
  const std::size_t offsets = header.find("data_offsets", at);
  return 8 + n + std::stoull(header.substr(header.find('[', offsets) + 1));
}

TEST(Checkpoint, DamagedTruncatedOrForeignFilesAreRefusedByName) {
  test::TempDir dir("dpl_checkpoint_bad");
  const std::string path = dir.file("c.safetensors");
  Replica run(1);
  run.steps(2);
  train::save_checkpoint(path, run.state());
  const auto before = run.model.arena().params().to_vector<float>();

  // One flipped byte inside a weight.
  const std::string damaged = dir.file("damaged.safetensors");
  std::filesystem::copy_file(path, damaged);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(data_offset(damaged, "model/l2.bias")));
    f.put('\x7f');
  }
  Replica other(3);
  train::TrainingState state = other.state();
  DPL_EXPECT_ERROR(train::load_checkpoint(damaged, state),
                   AllOf(HasSubstr(damaged), HasSubstr("tensor 'model/l2.bias' does not match its checksum")));

  const std::string truncated = dir.file("truncated.safetensors");
  std::filesystem::copy_file(path, truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 3);
  DPL_EXPECT_ERROR(train::load_checkpoint(truncated, state), HasSubstr(truncated));

  Replica wider(1, 9);
  train::TrainingState wide = wider.state();
  DPL_EXPECT_ERROR(train::load_checkpoint(path, wide),
                   AllOf(HasSubstr(path), HasSubstr("does not fit the model"),
                         HasSubstr("'l1.weight' has shape (8, 5) in the file but (9, 5) in the model")));

  const std::string weights = dir.file("weights.safetensors");
  nn::save_weights(run.model, weights);
  DPL_EXPECT_ERROR(train::load_checkpoint(weights, state), HasSubstr("is not a dpl checkpoint"));

  // Nothing was changed by the refusals.
  EXPECT_EQ(run.model.arena().params().to_vector<float>(), before);
  EXPECT_EQ(other.it.iteration(), 0);
}

// Numbers in the metadata are input too: each of these was once converted from a float beyond an
// integer's range (undefined behaviour), or to a clock duration that overflowed. The fuzzing
// seeds of the checkpoint reader hold them as regressions.
TEST(Checkpoint, MetadataNumbersOutOfRangeAreRefusedByName) {
  test::TempDir dir("dpl_checkpoint_numbers");
  const std::string path = dir.file("c.safetensors");
  Replica run(1);
  run.steps(4);  // past the end of the first epoch: the log has an entry
  train::save_checkpoint(path, run.state());
  const serialize::SafetensorsFile good = serialize::load_safetensors(path);

  struct Case {
    const char* key;
    std::string from, to;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"ranks", "1", "1e300", "expected \"ranks\" in the metadata to be a whole number in [1, 2147483647], got 1e+300"},
      {"ranks", "1", "0", "\"ranks\" in the metadata to be a whole number in [1, 2147483647], got 0"},
      {"log", "\"epoch\":1,", "\"epoch\":1e300,", "expected the log's \"epoch\" to be a whole number"},
      {"log", "\"epoch\":1,", "\"epoch\":-1,", "expected the log's \"epoch\" to be a whole number in [0, "},
      {"log", "{\"elapsed_time\":", "{\"elapsed_time\":1e300,\"x\":", "a finite elapsed time in [0, 1e9] seconds"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.to);
    std::map<std::string, std::string> metadata = good.metadata;
    std::string& value = metadata.at(c.key);
    const std::size_t at = value.find(c.from);
    ASSERT_NE(at, std::string::npos) << value;
    value.replace(at, c.from.size(), c.to);
    const std::string bad = dir.file("bad.safetensors");
    serialize::save_safetensors(bad, good.tensors, metadata);  // the tensors' checksums still hold
    Replica other(3);
    train::TrainingState state = other.state();
    DPL_EXPECT_ERROR(train::load_checkpoint(bad, state), AllOf(HasSubstr(bad), HasSubstr(c.message)));
  }
}

// The Trainer's pending observations come back from a checkpoint's values, input as well.
TEST(Checkpoint, ObservationCountsMustBeWholeNumbers) {
  train::Observation observation;
  for (const char* count : {"1e300", "-1", "1.5", "\"2\""}) {
    SCOPED_TRACE(count);
    const std::string text = std::string(R"([["main/loss", null, 2.5, )") + count + "]]";
    DPL_EXPECT_ERROR(observation.restore_json(text, Device::cpu()), HasSubstr("Observation::restore_json: expected "));
  }
  observation.restore_json(R"([["main/loss", null, 2.5, 2]])", Device::cpu());
  const auto means = observation.take_means();
  ASSERT_EQ(means.size(), 1u);
  EXPECT_DOUBLE_EQ(means[0].second, 1.25);
}

TEST(Checkpoint, SnapshotsKeepTheNewestOnes) {
  test::TempDir dir("dpl_snapshots");
  Generator init(1);
  nn::MLP model(8, 5, 3, init);
  optim::Adam opt;
  opt.setup(model);
  data::BatchIterator it(problem(), 5);
  train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, 7, train::LengthUnit::kIteration, nullptr, dir.path().string());
  trainer.extend(std::make_shared<train::extensions::Snapshot>("", 2), train::Trigger::iterations(2));
  trainer.run();
  std::vector<std::string> names;
  for (const std::string& p : train::list_checkpoints(dir.path().string()))
    names.push_back(std::filesystem::path(p).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"snapshot_iter_4.safetensors", "snapshot_iter_6.safetensors"}));
  DPL_EXPECT_ERROR(train::remove_old_checkpoints(dir.path().string(), 0, train::new_run_id()),
                   HasSubstr("expected keep >= 1, got 0"));
}

TEST(Trainer, ReportsEpochsAndSetsTheScheduledRate) {
  test::TempDir dir("dpl_trainer");
  Generator init(1);
  nn::MLP model(8, 5, 3, init);
  optim::SGD opt(0.1f);
  opt.setup(model);
  data::BatchIterator it(problem(), 5);  // 4 iterations per epoch
  train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation& observation) {
    const Variable logits = model(Variable(b.x));
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y);
  });
  std::ostringstream table;
  train::Trainer trainer(updater, 2, train::LengthUnit::kEpoch, nullptr, dir.path().string());
  trainer.extend(std::make_shared<train::extensions::LrSchedule>(optim::StepDecay(0.1, 0.5, 4)));
  trainer.extend(std::make_shared<train::extensions::Evaluator>(problem(), 7));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.extend(std::make_shared<train::extensions::PrintReport>(
      std::vector<std::string>{"epoch", "main/loss", "validation/main/accuracy", "lr"}, table));
  DPL_EXPECT_ERROR(trainer.extend(std::make_shared<train::extensions::LogReport>()),
                   HasSubstr("an extension named 'LogReport' is already there"));
  trainer.run();

  const train::LogReport* log = trainer.find<train::extensions::LogReport>()->log();
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

}  // namespace

namespace {
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
  data::BatchIterator it_{problem(), 5};
};

// A model with its optimizer, set up.
struct SmallMlp {
  Generator init{1};
  nn::MLP model{8, 5, 3, init};
  optim::SGD opt{0.1f};
  SmallMlp() { opt.setup(model); }
  Variable loss(const data::Batch& b) { return softmax_cross_entropy(model(Variable(b.x)), b.y); }
};
}  // namespace

TEST(Trainer, TrainsFromAnyBatchSourceButCheckpointsOnlyABatchIterator) {
  test::TempDir dir("dpl_trainer_source");
  SmallMlp learner;
  WrappedSource source;  // 4 iterations per epoch
  train::StandardUpdater updater(source, learner.opt, [&](const data::Batch& b, train::Observation&) {
    return learner.loss(b);
  });
  train::Trainer trainer(updater, 2, train::LengthUnit::kEpoch, nullptr, dir.path().string());
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.run();
  const train::LogReport* log = trainer.find<train::extensions::LogReport>()->log();
  ASSERT_EQ(log->log().size(), 2u);  // the epochs come from the source's own counters
  EXPECT_EQ(log->log()[1].iteration, 8);
  const std::string path = (dir.path() / "refused.safetensors").string();
  DPL_EXPECT_ERROR(trainer.save(path), HasSubstr("Trainer::save: expected the updater to draw from a data::BatchIterator"));
  EXPECT_FALSE(std::filesystem::exists(path));
  DPL_EXPECT_ERROR(trainer.resume(path), HasSubstr("Trainer::resume: expected the updater to draw from a data::BatchIterator"));
}
