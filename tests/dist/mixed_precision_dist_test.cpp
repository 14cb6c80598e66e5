// Mixed precision under mpiexec: a MultiNodeOptimizer around optim::MixedPrecision keeps every
// rank's masters identical, and an overflow on one rank only makes every rank skip that step.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::int64_t kIn = 8, kUnits = 16, kOut = 4;

test::Shard make_shard(const comm::Communicator& comm) { return test::batch_shard(comm, 31, kBatch, kIn, kOut); }

using test::same_on_every_rank;

class MixedPrecisionDist : public ::testing::TestWithParam<std::string> {};

// Rank r poisons its gradients at one step only on itself (the last rank at step 2, rank 0 at
// step 4): every rank must skip exactly those steps, back off the same way, and keep parameters,
// masters and Adam's moments identical to every other rank's throughout.
TEST_P(MixedPrecisionDist, OverflowOnOneRankSkipsTheStepEverywhere) {
  std::shared_ptr<comm::Communicator> shared = comm::create_communicator(GetParam());
  comm::Communicator& comm = *shared;
  const int rank = comm.rank(), last = comm.size() - 1;
  const test::Shard shard = make_shard(comm);

  // Different weights per rank: setup must give everyone rank 0's, masters included.
  Generator gen(700 + static_cast<std::uint64_t>(rank));
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(
      optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat16, {1024.0, 2.0, 0.5, 3}), shared);
  opt->setup(model);
  auto& mixed = dynamic_cast<optim::MixedPrecision&>(opt->actual());
  const bool masters_agree_after_setup = same_on_every_rank(comm, mixed.master_params());

  std::vector<bool> skipped;
  std::vector<double> scales;
  bool agree = true;
  for (int step = 0; step < 6; ++step) {
    opt->zero_grad();
    opt->backward(softmax_cross_entropy(model(Variable(shard.x.to(kFloat16))), shard.y));
    const int poisoned_rank = step == 2 ? last : step == 4 ? 0 : -1;
    if (rank == poisoned_rank) {
      Tensor g = model.arena().grads().narrow(0, 3, 1);
      g.fill_(step == 2 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN());
    }
    opt->update();
    skipped.push_back(mixed.last_step_skipped());
    scales.push_back(mixed.loss_scale());
    agree = same_on_every_rank(comm, model.arena().params()) && agree;
    agree = same_on_every_rank(comm, mixed.master_params()) && agree;
    for (const auto& [name, t] : mixed.state()) agree = same_on_every_rank(comm, t) && agree;
  }

  EXPECT_TRUE(masters_agree_after_setup) << "rank " << rank;
  EXPECT_TRUE(agree) << "rank " << rank << ": the ranks' weights or state diverged";
  EXPECT_EQ(skipped, (std::vector<bool>{false, false, true, false, true, false})) << "rank " << rank;
  // Good steps 1, 2, then overflow (512), good 1, overflow (256), good 1.
  EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 512, 512, 256, 256})) << "rank " << rank;
  EXPECT_EQ(opt->t(), 4) << "rank " << rank;
  EXPECT_EQ(mixed.skipped_steps(), 2) << "rank " << rank;
}

// bfloat16 through update(loss_fn): no loss scaling, no flag, the ranks stay identical and learn.
TEST_P(MixedPrecisionDist, BFloat16StaysInStep) {
  std::shared_ptr<comm::Communicator> shared = comm::create_communicator(GetParam());
  comm::Communicator& comm = *shared;
  const test::Shard shard = make_shard(comm);
  Generator gen(800 + static_cast<std::uint64_t>(comm.rank()));
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(
      optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), kBFloat16), shared);
  opt->setup(model);
  auto& mixed = dynamic_cast<optim::MixedPrecision&>(opt->actual());
  float first = 0.f, loss = 0.f;
  for (int step = 0; step < 20; ++step) {
    loss = opt->update([&] { return softmax_cross_entropy(model(Variable(shard.x.to(kBFloat16))), shard.y); }).item();
    if (step == 0) first = loss;
  }
  const bool masters_agree = same_on_every_rank(comm, mixed.master_params());
  const bool params_agree = same_on_every_rank(comm, model.arena().params());
  EXPECT_TRUE(masters_agree) << "rank " << comm.rank();
  EXPECT_TRUE(params_agree) << "rank " << comm.rank();
  EXPECT_EQ(model.arena().dtype(), kBFloat16);
  EXPECT_EQ(opt->t(), 20);
  EXPECT_LT(loss, first) << "rank " << comm.rank() << " did not learn its shard";
}

INSTANTIATE_TEST_SUITE_P(Communicators, MixedPrecisionDist, ::testing::Values("naive", "hierarchical"));

}  // namespace
