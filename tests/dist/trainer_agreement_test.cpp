// Trainer.run agrees on the run's length before the first step: ranks that would run different
// numbers of steps are refused together, naming the setting and each rank's value, instead of
// waiting for each other at the end of the shorter run.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {

data::Dataset tiny_data(std::int64_t samples) {
  Generator gen(5);
  Tensor x = Tensor::uniform({samples, 3}, 0.f, 1.f, gen);
  Tensor y = Tensor::zeros({samples}, kInt32);
  return data::Dataset(x, y);
}

// A plain (not data-parallel) optimizer: the only collective is the Trainer's own check.
std::string run_error(const std::shared_ptr<comm::Communicator>& comm, std::int64_t samples, std::int64_t batch,
                      std::int64_t length, train::LengthUnit unit) {
  Generator init(1);
  nn::Linear model(3, 2, true, init);
  optim::SGD optimizer(0.1f);
  optimizer.setup(model);
  data::BatchIterator batches(tiny_data(samples), batch, false);
  train::StandardUpdater updater(batches, optimizer, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, train::TrainerOptions(length, unit).communicator(comm).out(""));
  return error_message([&] { trainer.run(); });
}

TEST(TrainerAgreement, DifferentBatchesPerEpochAreRefusedOnEveryRank) {
  const auto& comm = shared_communicator("naive");
  if (comm->size() < 2) GTEST_SKIP() << "needs two ranks";
  const int last = comm->size() - 1;
  const std::string what = run_error(comm, 16, comm->rank() == last ? 8 : 4, 1, train::LengthUnit::kEpoch);
  EXPECT_NE(what.find("Trainer.run (naive): setting 'batches per epoch' differs between ranks: "), std::string::npos)
      << what;
  EXPECT_NE(what.find("rank " + std::to_string(last) + " has 2"), std::string::npos) << what;
  EXPECT_EQ(what.find("training length"), std::string::npos) << what;
}

TEST(TrainerAgreement, DifferentLengthsAreRefusedOnEveryRank) {
  const auto& comm = shared_communicator("naive");
  if (comm->size() < 2) GTEST_SKIP() << "needs two ranks";
  const std::string what = run_error(comm, 16, 4, comm->rank() == 0 ? 3 : 2, train::LengthUnit::kIteration);
  EXPECT_NE(what.find("setting 'training length' differs between ranks: rank 0 has 3 iterations, rank"),
            std::string::npos)
      << what;
}

TEST(TrainerAgreement, ShardsOfDifferentLengthsRunTheSameNumberOfIterations) {
  const auto& comm = shared_communicator("naive");
  EXPECT_EQ(run_error(comm, 8 + 4 * comm->rank(), 4, 2, train::LengthUnit::kIteration),
            "<no dpl::Error was thrown>");
}

}  // namespace
}  // namespace dpl::test
