// Checkpoints under mpiexec: each rank gets its own iterator and generator back, every rank
// must read the same file, and a failure on any rank is an error on every rank, never a hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A folder every rank of this job shares: named after rank 0's pid, so concurrent jobs differ.
std::string shared_folder(comm::Communicator& comm) {
  Tensor pid = Tensor::full({1}, static_cast<double>(::getpid()), TensorOptions(kInt64));
  comm.broadcast(pid, 0);
  const auto path = std::filesystem::temp_directory_path() /
                    ("dpl_checkpoint_dist_" + std::to_string(pid.to_vector<std::int64_t>()[0]));
  if (comm.rank() == 0) std::filesystem::create_directories(path);
  comm.barrier();
  return path.string();
}

data::Dataset numbered(std::int64_t n) {
  Tensor x = Tensor::empty({n, 2});
  Tensor y = Tensor::zeros({n}, TensorOptions(kInt32));
  for (std::int64_t i = 0; i < n; ++i) {
    x.set<float>({i, 0}, static_cast<float>(i));
    x.set<float>({i, 1}, 1.f);
  }
  return data::Dataset(x, y);
}

TEST(CheckpointDist, EveryRankGetsItsOwnIteratorAndGeneratorBack) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const int rank = comm->rank();
  const std::string folder = shared_folder(*comm);
  const std::string path = folder + "/c.safetensors";

  Generator init(1);
  nn::MLP model(4, 2, 2, init);
  // Shards of different sizes and seeds per rank: their states differ in length and content.
  data::BatchIterator it(numbered(7 + rank), 3, true, 50 + static_cast<std::uint64_t>(rank));
  Generator gen(90 + static_cast<std::uint64_t>(rank));
  it.next();
  gen.next_u64();
  train::TrainingState saving{&model, nullptr, &it, {{"gen", &gen}}, nullptr, {{"step", "1"}}};
  train::save_checkpoint(path, saving, comm.get());
  const auto expected_batch = it.next().x.to_vector<float>();
  const std::uint64_t expected_draw = gen.next_u64();

  data::BatchIterator fresh(numbered(7 + rank), 3, true, 0);
  Generator fresh_gen(0);
  train::TrainingState loading{&model, nullptr, &fresh, {{"gen", &fresh_gen}}, nullptr, {}};
  train::load_checkpoint(path, loading, comm.get());
  EXPECT_EQ(fresh.next().x.to_vector<float>(), expected_batch) << "rank " << rank;
  EXPECT_EQ(fresh_gen.next_u64(), expected_draw) << "rank " << rank;
  EXPECT_EQ(loading.values.at("step"), "1");

  // A checkpoint of one process cannot restore the per-rank parts of several.
  const std::string single = folder + "/single.safetensors";
  if (rank == 0) train::save_checkpoint(single, saving);
  comm->barrier();
  const std::string message = test::error_message([&] { train::load_checkpoint(single, loading, comm.get()); });
  if (comm->size() > 1) {
    EXPECT_THAT(message, HasSubstr("was saved by 1 processes, this job has " + std::to_string(comm->size())));
  }
  comm->barrier();
  if (rank == 0) std::filesystem::remove_all(folder);
}

// A global source's checkpoint of p ranks loads on another count (here rank 0 alone, a job of
// one): the source continues at the saved global position, each generator is re-seeded the same
// way on every load (and not with any saved rank's state), and every saved rank's values come back.
TEST(CheckpointDist, AGlobalSourceLoadsOnAnotherCountWithGeneratorsReseeded) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const int rank = comm->rank();
  const int size = comm->size();
  const std::string folder = shared_folder(*comm);
  const std::string path = folder + "/g.safetensors";

  Generator init(1);
  nn::MLP model(4, 2, 2, init);
  constexpr std::int64_t kGlobal = 12;  // every count of the dist layouts divides it
  data::GlobalBatchIterator source(numbered(30), kGlobal, rank, size, true, 8);
  Generator gen(90 + static_cast<std::uint64_t>(rank));
  for (int i = 0; i < 3; ++i) source.next();
  train::TrainingState saving;
  saving.model = &model;
  saving.source = &source;
  saving.generators = {{"gen", &gen}};
  saving.rank_values = {{"mine", "rank " + std::to_string(rank)}};
  train::save_checkpoint(path, saving, comm.get());
  const std::uint64_t rank0_next = gen.next_u64();
  EXPECT_EQ(train::checkpoint_global_batch(path), kGlobal);

  if (rank == 0) {
    // The uninterrupted job's next global batch, as one process serves it.
    data::GlobalBatchIterator straight(numbered(30), kGlobal, 0, 1, true, 8);
    for (int i = 0; i < 4; ++i) straight.next();
    const auto expected = straight.next().x.to_vector<float>();
    std::vector<std::uint64_t> draws;
    for (int load = 0; load < 2; ++load) {
      data::GlobalBatchIterator alone(numbered(30), kGlobal, 0, 1, true, 8);
      Generator fresh(0);
      train::TrainingState state;
      state.model = &model;
      state.source = &alone;
      state.generators = {{"gen", &fresh}};
      state.rank_values = {{"mine", "unchanged"}};
      train::load_checkpoint(path, state);  // one process: another count unless the job has one
      EXPECT_EQ(alone.iteration(), 3);
      alone.next();
      EXPECT_EQ(alone.next().x.to_vector<float>(), expected);
      draws.push_back(fresh.next_u64());
      if (size > 1) {
        EXPECT_EQ(state.rank_values.at("mine"), "unchanged");
        ASSERT_EQ(state.saved_rank_values.at("mine").size(), static_cast<std::size_t>(size));
        EXPECT_EQ(state.saved_rank_values.at("mine").back(), "rank " + std::to_string(size - 1));
      } else {
        EXPECT_EQ(state.rank_values.at("mine"), "rank 0");
      }
    }
    EXPECT_EQ(draws[0], draws[1]) << "the re-seeding is deterministic";
    if (size > 1) {
      EXPECT_NE(draws[0], rank0_next) << "another count draws another stream";
    } else {
      EXPECT_EQ(draws[0], rank0_next) << "the same count restores the generator exactly";
    }
  }
  comm->barrier();
  if (rank == 0) std::filesystem::remove_all(folder);
}

TEST(CheckpointDist, RanksReadingDifferentFilesAllFail) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const int rank = comm->rank();
  const std::string folder = shared_folder(*comm);
  Generator init(1);
  nn::MLP model(4, 2, 2, init);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(), comm);
  opt->setup(model);
  train::TrainingState state{&model, opt.get(), nullptr, {}, nullptr, {}};
  train::save_checkpoint(folder + "/a.safetensors", state, comm.get());
  state.values = {{"other", "yes"}};
  train::save_checkpoint(folder + "/b.safetensors", state, comm.get());

  // The last rank reads another checkpoint; a missing file on rank 0 fails there alone.
  const bool odd_one = rank == comm->size() - 1 && comm->size() > 1;
  const std::string differ = test::error_message(
      [&] { train::load_checkpoint(folder + (odd_one ? "/b.safetensors" : "/a.safetensors"), state, comm.get()); });
  const std::string missing = test::error_message([&] {
    train::load_checkpoint(folder + (rank == 0 ? "/none.safetensors" : "/a.safetensors"), state, comm.get());
  });
  comm->barrier();
  if (rank == 0) std::filesystem::remove_all(folder);

  if (comm->size() > 1) {
    EXPECT_THAT(differ, AllOf(HasSubstr("load_checkpoint"), HasSubstr("the checkpoints read differ between ranks"),
                              HasSubstr("rank(s) " + std::to_string(comm->size() - 1))));
    // The rank that failed is the one named, with its error, although it is rank 0.
    EXPECT_THAT(missing, AllOf(HasSubstr("failed on rank(s) 0 of " + std::to_string(comm->size())),
                               HasSubstr("so every rank stops; rank 0: "),
                               HasSubstr("none.safetensors: cannot open the file")));
  } else {
    EXPECT_THAT(missing, HasSubstr("none.safetensors"));
  }
}

// A resumed run must see its data in the order it was saved with: another --seed, which cuts other
// shards from the same data, is refused on every rank, naming the setting and both values, and
// leaves the iterator as it was; the same seed resumes.
TEST(CheckpointDist, ResumingWithAnotherSeedIsRefusedOnEveryRank) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const std::string folder = shared_folder(*comm);
  const std::string path = folder + "/seed.safetensors";
  const data::Dataset all = comm->rank() == 0 ? numbered(24) : data::Dataset();
  const auto iterator = [&](std::uint64_t seed) {
    auto it = std::make_unique<data::BatchIterator>(data::scatter_dataset(all, *comm, true, seed), 3, true,
                                                    seed + static_cast<std::uint64_t>(comm->rank()));
    it->set_order_settings({{"seed (--seed)", std::to_string(seed)}});
    return it;
  };
  Generator init(1);
  nn::MLP model(4, 2, 2, init);
  const auto saved = iterator(3);
  saved->next();
  train::save_checkpoint(path, train::TrainingState{&model, nullptr, saved.get()}, comm.get());

  const auto other = iterator(4);
  train::TrainingState resuming{&model, nullptr, other.get()};
  DPL_EXPECT_ERROR(train::load_checkpoint(path, resuming, comm.get()),
                   AllOf(HasSubstr(path), HasSubstr("the data or their order differ from the run that saved the state"),
                         HasSubstr("setting 'seed (--seed)' was 3 when saved, is 4 now"),
                         HasSubstr("the data set's content differs from the one saved")));
  EXPECT_EQ(other->iteration(), 0);

  const auto same = iterator(3);
  train::TrainingState again{&model, nullptr, same.get()};
  train::load_checkpoint(path, again, comm.get());
  EXPECT_EQ(same->iteration(), 1);
  comm->barrier();
  if (comm->rank() == 0) std::filesystem::remove_all(folder);
}

// Rank 0 alone writes: when its write fails (a full disk, a missing folder) and every other rank
// succeeded, every rank names rank 0 as the one that failed, with its reason.
TEST(CheckpointDist, AFailedWriteNamesTheRankThatFailed) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  Generator init(1);
  nn::MLP model(4, 2, 2, init);
  const std::string path = "/nonexistent-dpl-folder/c.safetensors";
  const std::string message =
      test::error_message([&] { train::save_checkpoint(path, train::TrainingState{&model}, comm.get()); });
  EXPECT_THAT(message, HasSubstr(path));
  if (comm->size() > 1) {
    EXPECT_THAT(message, AllOf(HasSubstr("save_checkpoint (naive): failed on rank(s) 0 of " +
                                         std::to_string(comm->size()) + ", so every rank stops; rank 0: "),
                               ::testing::Not(HasSubstr("rank(s) 1"))));
  }
}

}  // namespace
