// The non-finite check under mpiexec: an Inf or NaN on one rank only is caught by every rank at
// the same step, before the allreduce could carry it into anyone's weights; kStop throws the same
// message on every rank naming the rank(s), kSkip skips the step everywhere alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

constexpr std::int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::int64_t kIn = 8, kUnits = 16, kOut = 4;

// The message's length and two 16-bit halves of its FNV-1a hash, exact as floats: enough to tell
// whether every rank threw the same text without sending it.
std::vector<float> digest(const std::string& text) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return {static_cast<float>(text.size()), static_cast<float>(h & 0xffffu), static_cast<float>(h >> 16)};
}

bool same_text_on_every_rank(comm::Communicator& comm, const std::string& text) {
  return test::same_on_every_rank(comm, Tensor::from_vector(digest(text), {3}));
}

class NonFiniteDist : public ::testing::TestWithParam<std::string> {};

// The last rank puts a NaN into one gradient element of its third parameter at step 2: every
// rank stops at that step with the same message, naming that rank and parameter, and no rank's
// weights took the step.
TEST_P(NonFiniteDist, NaNOnOneRankStopsEveryRankWithTheSameMessage) {
  std::shared_ptr<comm::Communicator> shared = comm::create_communicator(GetParam());
  comm::Communicator& comm = *shared;
  const int rank = comm.rank(), last = comm.size() - 1;
  const test::Shard shard = test::batch_shard(comm, 41, kBatch, kIn, kOut);
  Generator gen(900);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), shared);
  opt->setup(model);
  const std::string poisoned = model.named_parameters()[2].first;

  // error_message's text when update() returned normally, which no expectation below accepts.
  const std::string no_error = test::error_message([] {});
  std::string message = no_error;
  Tensor before;
  for (int step = 1; step <= 3 && message == no_error; ++step) {
    opt->zero_grad();
    opt->backward(softmax_cross_entropy(model(Variable(shard.x)), shard.y));
    if (step == 2 && rank == last) {
      Tensor g = model.named_parameters()[2].second.grad();
      g.narrow(0, 1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    }
    before = model.arena().params().clone();
    message = test::error_message([&] { opt->update(); });
  }
  const bool same_message = same_text_on_every_rank(comm, message);
  const bool same_params = test::same_on_every_rank(comm, model.arena().params());
  const auto unchanged = model.arena().params().to_vector<float>() == before.to_vector<float>();

  EXPECT_THAT(message, HasSubstr("iteration 2: non-finite gradient (Inf or NaN) of parameter '" + poisoned +
                                 "' on rank(s) " + std::to_string(last) + "; the loss was not seen"))
      << "rank " << rank;
  EXPECT_TRUE(same_message) << "rank " << rank << " threw: " << message;
  EXPECT_TRUE(same_params) << "rank " << rank;
  EXPECT_TRUE(unchanged) << "rank " << rank << ": the stopped step changed the weights";
  EXPECT_EQ(opt->t(), 1) << "rank " << rank;
}

// A NaN in the data of rank 1 (and of the last rank too): the loss is named with the ranks, and
// the first parameter whose averaged gradient is NaN.
TEST_P(NonFiniteDist, NaNInTheDataOfSomeRanksNamesThemAndTheirLoss) {
  std::shared_ptr<comm::Communicator> shared = comm::create_communicator(GetParam());
  comm::Communicator& comm = *shared;
  const int rank = comm.rank(), last = comm.size() - 1;
  const test::Shard shard = test::batch_shard(comm, 43, kBatch, kIn, kOut);
  Tensor x = shard.x.clone();
  if (rank == 1 || rank == last) x.set<float>({0, 3}, std::numeric_limits<float>::quiet_NaN());
  Generator gen(901);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), shared);
  opt->setup(model);
  const std::string message =
      test::error_message([&] { opt->update([&] { return softmax_cross_entropy(model(Variable(x)), shard.y); }); });
  const bool same_message = same_text_on_every_rank(comm, message);
  const std::string ranks = last == 1 ? "1" : "1, " + std::to_string(last);
  EXPECT_THAT(message, HasSubstr("iteration 1: non-finite gradient (Inf or NaN) of parameter 'l1.weight' on rank(s) " +
                                 ranks + "; the loss was non-finite on rank(s) " + ranks))
      << "rank " << rank;
  EXPECT_TRUE(same_message) << "rank " << rank << " threw: " << message;
}

// kSkip: rank 0 poisons step 2 and the last rank step 4 (an Inf): every rank skips exactly those
// steps, and parameters and momentum stay identical on every rank throughout.
TEST_P(NonFiniteDist, SkipPolicySkipsTheSameStepsEverywhere) {
  std::shared_ptr<comm::Communicator> shared = comm::create_communicator(GetParam());
  comm::Communicator& comm = *shared;
  const int rank = comm.rank(), last = comm.size() - 1;
  const test::Shard shard = test::batch_shard(comm, 47, kBatch, kIn, kOut);
  Generator gen(902 + static_cast<std::uint64_t>(rank));  // setup must give every rank rank 0's weights
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), shared);
  opt->set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  opt->setup(model);

  std::vector<bool> skipped;
  bool agree = true, unchanged_when_skipped = true;
  for (int step = 1; step <= 5; ++step) {
    opt->zero_grad();
    opt->backward(softmax_cross_entropy(model(Variable(shard.x)), shard.y));
    const int poisoned_rank = step == 2 ? 0 : step == 4 ? last : -1;
    if (rank == poisoned_rank) {
      Tensor g = model.arena().grads().narrow(0, 5, 1);
      g.fill_(step == 2 ? std::numeric_limits<double>::quiet_NaN() : -std::numeric_limits<double>::infinity());
    }
    const Tensor before = model.arena().params().clone();
    const Tensor velocity = opt->state()[0].second.clone();
    opt->update();
    skipped.push_back(opt->last_step_skipped());
    if (opt->last_step_skipped())
      unchanged_when_skipped = unchanged_when_skipped &&
                               model.arena().params().to_vector<float>() == before.to_vector<float>() &&
                               opt->state()[0].second.to_vector<float>() == velocity.to_vector<float>();
    agree = test::same_on_every_rank(comm, model.arena().params()) && agree;
    agree = test::same_on_every_rank(comm, opt->state()[0].second) && agree;
  }
  EXPECT_EQ(skipped, (std::vector<bool>{false, true, false, true, false})) << "rank " << rank;
  EXPECT_TRUE(agree) << "rank " << rank << ": the ranks' weights or momentum diverged";
  EXPECT_TRUE(unchanged_when_skipped) << "rank " << rank;
  EXPECT_EQ(opt->t(), 3) << "rank " << rank;
  EXPECT_EQ(opt->skipped_steps(), 2) << "rank " << rank;
  EXPECT_EQ(opt->iteration(), 5) << "rank " << rank;
}

INSTANTIATE_TEST_SUITE_P(Communicators, NonFiniteDist, ::testing::Values("naive", "hierarchical"));

}  // namespace
