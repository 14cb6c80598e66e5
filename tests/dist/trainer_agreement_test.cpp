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

// Observes "main/rank" = this rank's number (and, on the last rank only when `odd_key`, a key of
// its own) before every update.
class RankObserver : public train::Extension {
 public:
  RankObserver(int rank, bool odd_key) : rank_(rank), odd_key_(odd_key) {}
  std::string name() const override { return "RankObserver"; }
  void before_update(train::Trainer& trainer) override {
    trainer.observation().observe("main/rank", static_cast<double>(rank_));
    if (odd_key_) trainer.observation().observe("main/only_here", 1.0);
  }

 private:
  int rank_;
  bool odd_key_;
};

// The log's values with the ranks' keys, or the error every rank gets.
std::string logged_rank_mean(const std::shared_ptr<comm::Communicator>& comm, bool odd_key, double* mean) {
  Generator init(1);
  nn::Linear model(3, 2, true, init);
  optim::SGD optimizer(0.1f);
  optimizer.setup(model);
  data::BatchIterator batches(tiny_data(16), 4, false);
  train::StandardUpdater updater(batches, optimizer, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, train::TrainerOptions(2, train::LengthUnit::kIteration).communicator(comm).out(""));
  trainer.extend(std::make_shared<RankObserver>(comm->rank(), odd_key));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  const std::string what = error_message([&] { trainer.run(); });
  if (auto* log = trainer.find<train::extensions::LogReport>()->log(); log != nullptr && !log->log().empty())
    *mean = *log->log().back().get("main/rank");
  return what;
}

TEST(TrainerAgreement, TheLogHoldsTheMeanOverAllRanksOnEveryRank) {
  const auto& comm = shared_communicator("naive");
  double mean = -1.0;
  EXPECT_EQ(logged_rank_mean(comm, false, &mean), "<no dpl::Error was thrown>");
  EXPECT_DOUBLE_EQ(mean, (comm->size() - 1) / 2.0);  // the mean of 0, 1, ..., size - 1
}

TEST(TrainerAgreement, RanksObservingDifferentKeysAreRefusedOnEveryRank) {
  const auto& comm = shared_communicator("naive");
  if (comm->size() < 2) GTEST_SKIP() << "needs two ranks";
  double mean = -1.0;
  const std::string what = logged_rank_mean(comm, comm->rank() == comm->size() - 1, &mean);
  EXPECT_NE(what.find("LogReport (naive): the observed keys differ between ranks (rank(s) " +
                      std::to_string(comm->size() - 1) + " differ from rank 0)"),
            std::string::npos)
      << what;
}

}  // namespace
}  // namespace dpl::test
