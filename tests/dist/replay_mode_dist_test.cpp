// Replay mode of a MultiNodeOptimizer (the protocol of a step recorded as a CUDA graph) under
// mpiexec: one process follows the protocol with results bit-identical to ordinary steps (the
// "replay" re-runs the recorded calls, as a graph replays their kernels); several processes are
// refused on every rank alike, with the reason, before anything is recorded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

constexpr std::int64_t kBatch = 12, kIn = 5, kUnits = 8, kOut = 3;

TEST(ReplayModeDist, OneProcessStepsAreBitIdenticalAndTimedAsOneStepPhase) {
  comm::Communicator& world = test::communicator("naive");
  if (world.size() != 1) GTEST_SKIP() << "one process only (several are refused: the next test)";
  Generator data_gen(5);
  const Tensor x = Tensor::normal({kBatch, kIn}, 0.f, 1.f, data_gen);
  Tensor y = Tensor::empty({kBatch}, kInt32);
  for (std::int64_t i = 0; i < kBatch; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(data_gen.below(kOut)));

  std::vector<float> results[2];
  for (const bool replay : {false, true}) {
    Generator gen(9);
    nn::MLP model(kUnits, kIn, kOut, gen);
    auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(1e-2f), comm::create_communicator("naive"));
    opt->setup(model);
    const auto loss_fn = [&] { return softmax_cross_entropy(model(Variable(x)), y); };
    for (int s = 0; s < 5; ++s) {
      if (!replay || s == 0) {
        opt->update(loss_fn);
        if (replay) opt->set_replay_mode(true);
        continue;
      }
      opt->prepare_replay();
      opt->update(loss_fn);
      opt->finish_replay();
    }
    EXPECT_EQ(opt->t(), 5);
    if (replay) {
      // One "step" phase per replayed step, after the ordinary first step's phases.
      const profile::PhaseSeries* steps = opt->timer().find("step");
      ASSERT_NE(steps, nullptr);
      EXPECT_EQ(steps->samples.size(), 4u);
    }
    results[replay ? 1 : 0] = model.arena().params().to_vector<float>();
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(ReplayModeDist, SeveralProcessesAreRefusedOnEveryRank) {
  comm::Communicator& world = test::communicator("naive");
  if (world.size() == 1) GTEST_SKIP() << "needs several processes";
  Generator gen(9);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.1f), comm::create_communicator("naive"));
  opt->setup(model);
  EXPECT_THAT(opt->replay_refusal(), HasSubstr(std::to_string(world.size()) + " processes is not supported"));
  const std::string message = test::error_message([&] { opt->set_replay_mode(true); });
  EXPECT_THAT(message, HasSubstr("cannot run a recorded step"));
  EXPECT_FALSE(opt->replay_mode());
}

}  // namespace
