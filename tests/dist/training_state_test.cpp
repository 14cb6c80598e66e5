// Learning-rate schedules and optimizer state through MultiNodeOptimizer under mpiexec: the
// decorator forwards set_lr, state_scalars and load_state to the wrapped optimizer, and a data-
// parallel run stopped, saved and restored on every rank continues bit-identically.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::int64_t kIn = 6, kUnits = 8, kOut = 3;

const optim::LinearWarmup kSchedule = optim::with_warmup(optim::CosineAnnealing(0.01, 0.001, 4), 0.001, 2);

using test::Shard;

Shard my_shard(const comm::Communicator& comm) { return test::batch_shard(comm, 21, kBatch, kIn, kOut); }

void train(nn::Module& model, optim::Optimizer& opt, const Shard& s, int steps) {
  for (int i = 0; i < steps; ++i) {
    kSchedule.apply(opt, opt.t());
    opt.update([&] { return softmax_cross_entropy(model(Variable(s.x)), s.y); });
  }
}

// Each rank starts from its own weights; setup() replaces them with rank 0's.
struct Replica {
  Generator gen;
  nn::MLP model;
  std::unique_ptr<parallel::MultiNodeOptimizer> opt;
  Replica(std::uint64_t seed, const std::shared_ptr<comm::Communicator>& comm)
      : gen(seed), model(kUnits, kIn, kOut, gen),
        opt(parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(0.01f), comm)) {
    opt->setup(model);
  }
};

TEST(TrainingStateDist, ScheduleAndRestoredStateReachTheWrappedOptimizer) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const std::uint64_t rank = static_cast<std::uint64_t>(comm->rank());
  const Shard shard = my_shard(*comm);
  test::TempDir dir("dpl_training_state_dist");  // one per rank: the pid is in its name

  Replica uninterrupted(100 + rank, comm);
  train(uninterrupted.model, *uninterrupted.opt, shard, 6);

  Replica first_half(100 + rank, comm);
  train(first_half.model, *first_half.opt, shard, 3);
  const double lr_after_three = first_half.opt->actual().lr();
  serialize::save_weights(first_half.model, dir.file("weights.safetensors"));
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& [name, t] : first_half.opt->state()) state.emplace_back(name, t.clone());
  const std::map<std::string, double> scalars = first_half.opt->state_scalars();

  Replica resumed(900 + rank, comm);
  serialize::load_weights(resumed.model, dir.file("weights.safetensors"));
  resumed.opt->load_state(state, scalars);
  const std::int64_t t_restored = resumed.opt->actual().t();
  train(resumed.model, *resumed.opt, shard, 3);

  EXPECT_EQ(lr_after_three, static_cast<double>(static_cast<float>(kSchedule.lr_at(2))));
  EXPECT_EQ(scalars.at("moment_steps"), 3.0);
  EXPECT_EQ(t_restored, 3);
  EXPECT_EQ(resumed.opt->actual().lr(), uninterrupted.opt->actual().lr());
  EXPECT_EQ(resumed.model.arena().params().to_vector<float>(), uninterrupted.model.arena().params().to_vector<float>())
      << "rank " << rank;
  EXPECT_EQ(resumed.opt->state_scalars(), uninterrupted.opt->state_scalars());
}

}  // namespace
