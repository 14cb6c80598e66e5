// Checkpoints in one process: what they restore and how damaged or foreign files are refused
// (the Snapshot extension's tests are in unit/train/extensions/snapshot_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/serialize.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/random_dataset.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;

data::Dataset problem() { return test::random_dataset(20, 4); }

// A model, its optimizer, iterator, a generator and a log, trained for a few steps.
struct Replica {
  Generator init;
  nn::MLP model;
  optim::Adam opt{0.01f};
  data::BatchIterator it;
  Generator noise{11};
  train::TrainingLog log{""};
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

// A global source's position is stored once, with its global batch in the header; a checkpoint
// holds one kind of data position, and a run with the other kind is refused, saying which.
TEST(Checkpoint, AGlobalSourceIsStoredOnceAndMustMeetItsOwnKind) {
  test::TempDir dir("dpl_checkpoint_global");
  Generator init(1);
  nn::MLP model(8, 4, 3, init);
  optim::Adam opt(0.01f);
  opt.setup(model);
  data::GlobalBatchIterator source(problem(), 6, 0, 1, true, 5);
  for (int i = 0; i < 4; ++i) source.next();
  train::TrainingState saved;
  saved.model = &model;
  saved.optimizer = &opt;
  saved.source = &source;
  train::save_checkpoint(dir.file("g.safetensors"), saved);
  EXPECT_EQ(train::checkpoint_global_batch(dir.file("g.safetensors")), 6);
  const serialize::SafetensorsFile file = serialize::load_safetensors(dir.file("g.safetensors"));
  EXPECT_TRUE(file.contains("data/counters"));
  EXPECT_TRUE(file.contains("data/settings"));
  EXPECT_FALSE(file.contains("rank0/iterator/counters"));

  data::GlobalBatchIterator resumed(problem(), 6, 0, 1, true, 5);
  train::TrainingState state = saved;
  state.source = &resumed;
  train::load_checkpoint(dir.file("g.safetensors"), state);
  EXPECT_EQ(resumed.iteration(), 4);
  EXPECT_EQ(resumed.next().x.to_vector<float>(), source.next().x.to_vector<float>());

  // A per-rank iterator cannot continue a global position, nor a global source per-rank ones.
  Replica replica(1);
  train::TrainingState per_rank = replica.state();
  per_rank.log = nullptr;
  per_rank.generators.clear();
  per_rank.model = &model;
  per_rank.optimizer = &opt;
  DPL_EXPECT_ERROR(train::load_checkpoint(dir.file("g.safetensors"), per_rank),
                   HasSubstr("holds the job's global data position"));
  train::save_checkpoint(dir.file("r.safetensors"), per_rank);
  EXPECT_EQ(train::checkpoint_global_batch(dir.file("r.safetensors")), 0);
  DPL_EXPECT_ERROR(train::load_checkpoint(dir.file("r.safetensors"), state),
                   AllOf(HasSubstr("holds no global data position: it holds each rank's own data iterator"),
                         HasSubstr("r.safetensors")));
  // Another seed is named before anything changes.
  data::GlobalBatchIterator other(problem(), 6, 0, 1, true, 6);
  state.source = &other;
  DPL_EXPECT_ERROR(train::load_checkpoint(dir.file("g.safetensors"), state),
                   HasSubstr("setting 'seed' was 5 when saved, is 6 now"));
  EXPECT_EQ(other.iteration(), 0);
  DPL_EXPECT_ERROR(train::checkpoint_global_batch(dir.file("none.safetensors")), HasSubstr("cannot read"));
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
  serialize::save_weights(run.model, weights);
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

}  // namespace
