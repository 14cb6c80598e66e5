// Sharded optimizer state (MultiNodeOptimizer::set_shard_optimizer_state) under mpiexec: the same
// parameters as the unsharded data-parallel step, the state's bytes split between the ranks, the
// gathered state equal to the unsharded one and loadable into a sharded optimizer, and the
// refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "dist_test_util.hpp"
#include "support/expect_error.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::int64_t kIn = 8, kUnits = 16, kOut = 4;

std::unique_ptr<optim::Optimizer> make_rule(const std::string& kind) {
  if (kind == "sgd") return std::make_unique<optim::SGD>(0.1f);
  if (kind == "momentum") return std::make_unique<optim::MomentumSGD>(0.1f, 0.9f);
  if (kind == "rmsprop")
    return std::make_unique<optim::RMSprop>(optim::RMSpropOptions(1e-2f).momentum(0.5f).centered(true));
  if (kind == "adagrad") return std::make_unique<optim::Adagrad>(optim::AdagradOptions(0.1f).initial_accumulator_value(0.1f));
  auto rule = std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-2f).weight_decay(0.1f));
  // Groups whose ranges the shards cut through: no decay and three times the rate on the biases.
  if (kind == "adamw_groups") rule->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f).lr(3e-2f));
  return rule;
}

struct TrainingRun {
  std::unique_ptr<nn::MLP> model;
  std::unique_ptr<parallel::MultiNodeOptimizer> opt;
};

TrainingRun make_run(const std::string& comm_name, const std::string& kind, bool sharded) {
  TrainingRun r;
  Generator gen(7);
  r.model = std::make_unique<nn::MLP>(kUnits, kIn, kOut, gen);
  r.opt = parallel::create_multi_node_optimizer(make_rule(kind), comm::create_communicator(comm_name));
  r.opt->set_shard_optimizer_state(sharded);
  r.opt->setup(*r.model);
  return r;
}

void train(TrainingRun& r, int steps, std::uint64_t seed) {
  const auto shard = test::batch_shard(r.opt->communicator(), seed, kBatch, kIn, kOut);
  for (int s = 0; s < steps; ++s)
    r.opt->update([&] { return softmax_cross_entropy((*r.model)(Variable(shard.x)), shard.y); });
}

// Relative to 1 + |y| (test::worst_relative_difference): a centered RMSprop's momentum divides by
// a small root, which scales the rounding of the sums with it.

class ShardedState : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Sharded and unsharded steps see the same averaged gradients (summed in another order by the
// reduce-scatter) and apply the same elementwise rule, so the parameters agree to rounding.
TEST_P(ShardedState, MatchesTheUnshardedStepAndSplitsTheStateBytes) {
  const auto [comm_name, kind] = GetParam();
  TrainingRun plain = make_run(comm_name, kind, false), sharded = make_run(comm_name, kind, true);
  train(plain, 6, 3);
  train(sharded, 6, 3);
  const int size = sharded.opt->communicator().size();
  EXPECT_LT(test::worst_relative_difference(sharded.model->arena().params(), plain.model->arena().params()), 1e-5)
      << comm_name << "/" << kind << " on " << size << " ranks";
  EXPECT_EQ(sharded.opt->t(), 6);

  // Every rank holds its block of each state tensor: the blocks add up to the unsharded bytes,
  // and none is larger than the whole divided by the ranks, rounded up.
  const std::int64_t whole = plain.opt->optimizer_state_bytes(), mine = sharded.opt->optimizer_state_bytes();
  Tensor total = Tensor::from_vector<std::int64_t>({mine}, {1});
  sharded.opt->communicator().allreduce(total, comm::ReduceOp::kSum);
  EXPECT_EQ(total.to_vector<std::int64_t>()[0], whole);
  const std::int64_t n = plain.model->arena().numel(), per_element = whole / n;
  EXPECT_EQ(whole % n, 0);
  EXPECT_LE(mine, per_element * ((n + size - 1) / size));
  if (size > 1 && kind != "sgd") EXPECT_LT(mine, whole);

  // The gathered state is the unsharded one, on every rank.
  const auto gathered = sharded.opt->gathered_state();
  const auto reference = plain.opt->state();
  ASSERT_EQ(gathered.size(), reference.size());
  for (std::size_t i = 0; i < gathered.size(); ++i) {
    EXPECT_EQ(gathered[i].first, reference[i].first);
    // 1e-4 here, not the parameters' 1e-5: centred RMSprop's momentum holds g / sqrt(v - mean(g)^2)
    // before the learning rate scales it, and in the first steps that root is small, so the sum
    // order of the gradients (reduce-scatter against allreduce, inside nodes first) shows more.
    EXPECT_LT(test::worst_relative_difference(gathered[i].second, reference[i].second), 1e-4) << gathered[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Communicators, ShardedState,
                         ::testing::Combine(::testing::ValuesIn(dpl::test::host_communicator_names()),
                                            ::testing::Values("sgd", "momentum", "adamw", "adamw_groups", "rmsprop",
                                                              "adagrad")));

// A state saved whole (as save_checkpoint saves gathered_state()) loads into a sharded optimizer,
// which then continues as the unsharded one does.
TEST(ShardedStateResume, AWholeStateLoadsIntoShardsAndContinues) {
  TrainingRun plain = make_run("naive", "adamw_groups", false);
  train(plain, 3, 5);
  TrainingRun sharded = make_run("naive", "adamw_groups", true);
  Tensor weights = sharded.model->arena().params();  // a handle on the arena's storage
  weights.copy_(plain.model->arena().params());
  sharded.opt->load_state(plain.opt->state(), plain.opt->state_scalars());
  train(plain, 3, 6);
  train(sharded, 3, 6);
  EXPECT_LT(test::worst_relative_difference(sharded.model->arena().params(), plain.model->arena().params()), 1e-5);
  EXPECT_EQ(sharded.opt->t(), plain.opt->t());
}

TEST(ShardedStateRefusals, EveryRankRefusesWhatCannotBeSharded) {
  Generator gen(7);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto lamb = parallel::create_multi_node_optimizer(std::make_unique<optim::LAMB>(), comm::create_communicator("naive"));
  lamb->set_shard_optimizer_state(true);
  DPL_EXPECT_ERROR(lamb->setup(model), ::testing::HasSubstr("not elementwise"));

  auto adam = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm::create_communicator("naive"));
  adam->setup(model);
  adam->set_shard_optimizer_state(true);
  DPL_EXPECT_ERROR(optim::clip_gradients(*adam, 1.0), ::testing::HasSubstr("sharded"));
  parallel::OverlapOptions overlap;
  overlap.enabled = true;
  DPL_EXPECT_ERROR(adam->set_overlap(overlap), ::testing::HasSubstr("sharded"));
  // Nothing was left half done: the ranks still step together, and agree.
  const auto shard = test::batch_shard(adam->communicator(), 9, kBatch, kIn, kOut);
  adam->update([&] { return softmax_cross_entropy(model(Variable(shard.x)), shard.y); });
  EXPECT_TRUE(test::same_on_every_rank(adam->communicator(), model.arena().params()));
}

}  // namespace
