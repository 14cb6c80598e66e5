// MultiNodeOptimizer under mpiexec: data-parallel equivalence, weight broadcast, model checks,
// phase timers.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::int64_t kIn = 8, kUnits = 16, kOut = 4;

struct Problem {
  Tensor x, y;
};

Problem make_problem(std::uint64_t seed) {
  Generator gen(seed);
  Problem p{Tensor::normal({kBatch, kIn}, 0.f, 1.f, gen), Tensor::empty({kBatch}, kInt32)};
  for (std::int64_t i = 0; i < kBatch; ++i) p.y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(kOut)));
  return p;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind) {
  if (kind == "sgd") return std::make_unique<optim::SGD>(0.1f);
  // The per-tensor rules read every tensor's norms from the averaged arena, so they too must step
  // as one process does.
  if (kind == "adamw") return std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-3f));
  if (kind == "lamb") return std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f));
  if (kind == "lars") return std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).trust_coefficient(0.02f));
  if (kind == "adamw_groups" || kind == "lamb_groups") {
    std::unique_ptr<optim::Optimizer> rule;
    if (kind == "adamw_groups") rule = std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-3f).weight_decay(0.1f));
    else rule = std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f).weight_decay(0.1f));
    rule->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f).lr(3.f * rule->lr()));
    return rule;
  }
  return std::make_unique<optim::MomentumSGD>(0.1f, 0.9f);
}

class DataParallelEquivalence : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// N ranks each stepping on B/N samples must end with the weights one process gets stepping on
// all B: the mean of per-rank mean gradients is the mean gradient of the whole batch. Only the
// order of float32 sums differs, so the weights agree to 2e-5 after 5 steps.
TEST_P(DataParallelEquivalence, MatchesSingleProcess) {
  const auto [comm_name, opt_kind] = GetParam();
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(comm_name);
  const int rank = comm->rank(), size = comm->size();
  const Problem prob = make_problem(11);
  const std::int64_t local = kBatch / size;
  const Tensor xs = prob.x.narrow(0, rank * local, local).contiguous();
  const Tensor ys = prob.y.narrow(0, rank * local, local).contiguous();

  // Each rank starts from different weights: setup must replace them with rank 0's.
  Generator gen(100 + static_cast<std::uint64_t>(rank));
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(make_optimizer(opt_kind), comm);
  opt->setup(model);

  Generator ref_gen(100);
  nn::MLP reference(kUnits, kIn, kOut, ref_gen);
  auto ref_opt = make_optimizer(opt_kind);
  ref_opt->setup(reference);

  for (int step = 0; step < 5; ++step) {
    opt->update([&] { return softmax_cross_entropy(model(Variable(xs)), ys); });
    ref_opt->update([&] { return softmax_cross_entropy(reference(Variable(prob.x)), prob.y); });
  }
  const auto got = model.arena().params().to_vector<float>();
  const auto want = reference.arena().params().to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  EXPECT_LT(worst, 2e-5) << "rank " << rank << " of " << size << " with " << comm_name << "/" << opt_kind;
  EXPECT_EQ(opt->t(), 5);
}

INSTANTIATE_TEST_SUITE_P(Communicators, DataParallelEquivalence,
                         ::testing::Combine(::testing::ValuesIn(dpl::test::host_communicator_names()),
                                            ::testing::Values("sgd", "momentum", "adamw", "lamb", "lars", "adamw_groups",
                                                              "lamb_groups")));

TEST(MultiNodeOptimizer, SetupBroadcastsRankZeroWeights) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  Generator gen(500 + static_cast<std::uint64_t>(comm->rank()));
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm);
  opt->setup(model);
  Generator gen0(500);
  nn::MLP rank0(kUnits, kIn, kOut, gen0);
  EXPECT_EQ(model.arena().params().to_vector<float>(), rank0.arena().params().to_vector<float>());
}

TEST(MultiNodeOptimizer, ModelMismatchThrowsOnEveryRank) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  if (comm->size() < 2) GTEST_SKIP() << "needs two ranks";
  // The last rank builds a wider hidden layer.
  const std::int64_t units = comm->rank() == comm->size() - 1 ? kUnits + 1 : kUnits;
  nn::MLP model(units, kIn, kOut);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(), comm);
  try {
    opt->setup(model);
    FAIL() << "setup accepted models that differ between ranks";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("differ"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(comm->size() - 1)), std::string::npos) << msg;
    if (comm->rank() == comm->size() - 1) {
      EXPECT_NE(msg.find("l1.weight"), std::string::npos) << msg;  // the first differing parameter
    }
  }
  // Nothing was mixed: the ranks are still in step and can talk.
  comm->barrier();
}

TEST(MultiNodeOptimizer, TimesEveryPhaseAndSummarisesAcrossRanks) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("hierarchical");
  Generator gen(3);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(), comm,
                                                   profile::TimingMode::kSynchronized);
  opt->setup(model);
  const Problem prob = make_problem(5);
  for (int i = 0; i < 4; ++i) opt->update([&] { return softmax_cross_entropy(model(Variable(prob.x)), prob.y); });
  const profile::Summary s = opt->summary(1);
  EXPECT_EQ(s.ranks, comm->size());
  EXPECT_EQ(s.allreduce_bytes, model.arena().nbytes());
  std::vector<std::string> names;
  for (const auto& p : s.phases) {
    names.push_back(p.name);
    EXPECT_EQ(p.iterations, 3) << p.name;
    EXPECT_GE(p.max, p.mean) << p.name;
    EXPECT_GE(p.mean, p.min) << p.name;
    EXPECT_GT(p.max, 0.0) << p.name;
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "compute"), names.end());
  // Forward and backward inside compute, listed after it.
  const auto compute_at = std::find(names.begin(), names.end(), "compute");
  const auto forward_at = std::find(names.begin(), names.end(), "compute/forward");
  const auto backward_at = std::find(names.begin(), names.end(), "compute/backward");
  ASSERT_NE(forward_at, names.end());
  ASSERT_NE(backward_at, names.end());
  EXPECT_LT(compute_at, forward_at);
  EXPECT_LT(forward_at, backward_at);
  const profile::PhaseSeries* computed = opt->timer().find("compute");
  const profile::PhaseSeries* forward = opt->timer().find("compute/forward");
  const profile::PhaseSeries* backward = opt->timer().find("compute/backward");
  for (std::size_t i = 0; i < computed->samples.size(); ++i) {
    const profile::PhaseSample& c = computed->samples[i];
    EXPECT_GE(forward->samples[i].start, c.start);
    EXPECT_LE(forward->samples[i].start + forward->samples[i].seconds, backward->samples[i].start + 1e-9);
    EXPECT_LE(backward->samples[i].start + backward->samples[i].seconds, c.start + c.seconds + 1e-9);
  }
  // The non-finite check's pass over the gradients, between backward and the allreduce.
  const auto prepare = std::find(names.begin(), names.end(), "prepare");
  EXPECT_NE(prepare, names.end());
  EXPECT_LT(prepare, std::find(names.begin(), names.end(), "allreduce"));
  const profile::PhaseSeries* prepared = opt->timer().find("prepare");
  const profile::PhaseSeries* reduced = opt->timer().find("allreduce");
  ASSERT_NE(prepared, nullptr);
  ASSERT_NE(reduced, nullptr);
  for (std::size_t i = 0; i < prepared->samples.size(); ++i)
    EXPECT_LE(prepared->samples[i].start + prepared->samples[i].seconds, reduced->samples[i].start + 1e-9);
  EXPECT_NE(std::find(names.begin(), names.end(), "allreduce"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "optimize"), names.end());
  if (comm->size() > 1) {
    EXPECT_GT(s.busbw_gbps, 0.0);
    EXPECT_DOUBLE_EQ(s.traffic_bytes, 2.0 * s.allreduce_bytes * (comm->size() - 1) / comm->size());
  }
  const std::string table = profile::format_table(s);
  EXPECT_NE(table.find("allreduce"), std::string::npos);
  EXPECT_NE(profile::to_json(s).find("\"busbw_gbps\""), std::string::npos);
}

}  // namespace
