// Gradient accumulation under mpiexec: k micro-batches of b samples per step give the update of
// one batch of k·b samples, with one allreduce per step (after the last backward, bucket by bucket
// with overlap), through Optimizer::update(loss_fn, k) and StandardUpdater::set_micro_batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "dist_test_util.hpp"
#include "support/expect_error.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kMicroBatches = 3;
constexpr std::int64_t kBatch = 36;  // per rank on 1 to 4 ranks: 36, 18, 12 or 9 rows, 3 micro-batches of whole rows
constexpr std::int64_t kIn = 8, kUnits = 16, kOut = 4;
constexpr int kSteps = 4;

struct TrainingRun {
  std::unique_ptr<nn::MLP> model;
  std::unique_ptr<parallel::MultiNodeOptimizer> opt;
};

TrainingRun make_run(const std::string& comm_name, bool overlap) {
  TrainingRun r;
  Generator gen(11);
  r.model = std::make_unique<nn::MLP>(kUnits, kIn, kOut, gen);
  r.opt = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(1e-2f),
                                                comm::create_communicator(comm_name));
  parallel::OverlapOptions o;
  o.enabled = overlap;
  // Small buckets, so that the MLP's gradients travel in several.
  o.bucket_bytes = o.first_bucket_bytes = 256;
  r.opt->set_overlap(o);
  r.opt->setup(*r.model);
  return r;
}

std::size_t samples_of(const parallel::MultiNodeOptimizer& opt, const std::string& phase) {
  const profile::PhaseSeries* s = opt.timer().find(phase);
  return s == nullptr ? 0 : s->samples.size();
}

class Accumulation : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(Accumulation, MicroBatchesGiveTheUpdateOfTheWholeBatchWithOneAllreducePerStep) {
  const auto& [comm_name, overlap] = GetParam();
  TrainingRun whole = make_run(comm_name, overlap), micro = make_run(comm_name, overlap);
  const auto shard = test::batch_shard(whole.opt->communicator(), 5, kBatch, kIn, kOut);
  const std::int64_t local = shard.x.size(0), part = local / kMicroBatches;
  ASSERT_EQ(part * kMicroBatches, local);
  for (int s = 0; s < kSteps; ++s) {
    const Variable whole_loss =
        whole.opt->update([&] { return softmax_cross_entropy((*whole.model)(Variable(shard.x)), shard.y); });
    const Variable micro_loss = micro.opt->update(
        [&](int i) {
          const Tensor x = shard.x.narrow(0, i * part, part), y = shard.y.narrow(0, i * part, part);
          return softmax_cross_entropy((*micro.model)(Variable(x)), y);
        },
        kMicroBatches);
    // The mean of equal micro-batches' mean losses is the whole batch's mean loss.
    EXPECT_NEAR(micro_loss.data().to_vector<float>()[0], whole_loss.data().to_vector<float>()[0], 1e-5);
  }
  // Float32 sums in another order: the tolerance of a few roundings per step, over 4 Adam steps.
  EXPECT_LT(test::worst_relative_difference(micro.model->arena().params(), whole.model->arena().params()), 1e-5)
      << comm_name << (overlap ? " with overlap" : "") << " on " << micro.opt->communicator().size() << " ranks";
  EXPECT_EQ(micro.opt->t(), kSteps);
  // One allreduce (and one compute phase) per step, however many micro-batches.
  EXPECT_EQ(samples_of(*micro.opt, "allreduce"), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(samples_of(*micro.opt, "compute"), static_cast<std::size_t>(kSteps));
  EXPECT_EQ(samples_of(*micro.opt, "allreduce"), samples_of(*whole.opt, "allreduce"));
}

INSTANTIATE_TEST_SUITE_P(Communicators, Accumulation,
                         ::testing::Combine(::testing::ValuesIn(dpl::test::host_communicator_names()),
                                            ::testing::Bool()));

// The Trainer's updater: micro_batches batches per update from the iterator, one step, the same
// parameters as an updater drawing batches of micro_batches times the size in the same order.
TEST(AccumulationUpdater, MicroBatchesFromTheIteratorStepLikeOneLargerBatch) {
  TrainingRun whole = make_run("naive", false), micro = make_run("naive", false);
  const auto shard = test::batch_shard(whole.opt->communicator(), 9, kBatch, kIn, kOut);
  const std::int64_t local = shard.x.size(0), part = local / kMicroBatches;
  const data::Dataset set(shard.x, shard.y);
  // No shuffling: the micro-batches are the whole batch's rows in order.
  data::BatchIterator whole_batches(set, local, false), micro_batches(set, part, false);
  const auto loss_of = [](nn::MLP& model) {
    return [&model](const data::Batch& b, train::Observation&) { return softmax_cross_entropy(model(Variable(b.x)), b.y); };
  };
  train::StandardUpdater whole_updater(whole_batches, *whole.opt, loss_of(*whole.model));
  train::StandardUpdater micro_updater(micro_batches, *micro.opt, loss_of(*micro.model));
  micro_updater.set_micro_batches(static_cast<int>(kMicroBatches));
  EXPECT_EQ(micro_updater.micro_batches(), kMicroBatches);
  train::Observation seen_whole, seen_micro;
  for (int s = 0; s < kSteps; ++s) {
    whole_updater.update(seen_whole);
    micro_updater.update(seen_micro);
  }
  EXPECT_EQ(micro_batches.iteration(), kSteps * kMicroBatches);
  EXPECT_EQ(micro.opt->t(), kSteps);
  EXPECT_LT(test::worst_relative_difference(micro.model->arena().params(), whole.model->arena().params()), 1e-5);
  EXPECT_EQ(samples_of(*micro.opt, "allreduce"), static_cast<std::size_t>(kSteps));

  DPL_EXPECT_ERROR(micro_updater.set_micro_batches(0),
                   ::testing::HasSubstr("expected at least 1 batch per update, got 0"));
  DPL_EXPECT_ERROR(micro.opt->update([&](int) { return Variable(); }, 0),
                   ::testing::HasSubstr("expected at least 1 micro-batch per step, got 0"));
}

}  // namespace
