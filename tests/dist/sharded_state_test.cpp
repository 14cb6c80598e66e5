// Sharded optimizer state (MultiNodeOptimizer::set_zero_stage, stages 1 and 2, float32 models and
// 16-bit ones under optim::MixedPrecision) under mpiexec: the same parameters as the unsharded
// data-parallel step, the state's bytes (masters included) split between the ranks, the gathered
// state equal to the unsharded one and loadable into a sharded optimizer and back, the same
// skipped and stopped steps, and the refusals.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

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
  DType dtype = kFloat32;
};

// Small buckets, so that stage 2 cuts the MLP's arena (about 500 elements) into several.
parallel::OverlapOptions small_buckets(bool enabled) {
  parallel::OverlapOptions o;
  o.enabled = enabled;
  o.first_bucket_bytes = 256;
  o.bucket_bytes = 1024;
  return o;
}

// stage: the ZeRO stage; dtype: kFloat32, or bfloat16/float16 under optim::MixedPrecision;
// overlap: stage 2's buckets reduce-scattered during backward (else after it).
TrainingRun make_run(const std::string& comm_name, const std::string& kind, int stage, DType dtype = kFloat32,
                     bool overlap = true) {
  TrainingRun r;
  Generator gen(7);
  r.model = std::make_unique<nn::MLP>(kUnits, kIn, kOut, gen);
  std::unique_ptr<optim::Optimizer> rule = make_rule(kind);
  if (dtype != kFloat32) rule = optim::mixed_precision(std::move(rule), dtype, {1024.0, 2.0, 0.5, 3});
  r.opt = parallel::create_multi_node_optimizer(std::move(rule), comm::create_communicator(comm_name));
  if (stage == 2) r.opt->set_overlap(small_buckets(overlap));
  r.opt->set_zero_stage(stage);
  r.opt->setup(*r.model);
  r.dtype = dtype;
  return r;
}

TrainingRun make_run(const std::string& comm_name, const std::string& kind, bool sharded) {
  return make_run(comm_name, kind, sharded ? 1 : 0);
}

void train(TrainingRun& r, int steps, std::uint64_t seed) {
  const auto shard = test::batch_shard(r.opt->communicator(), seed, kBatch, kIn, kOut);
  const Tensor x = shard.x.to(r.dtype);
  for (int s = 0; s < steps; ++s)
    r.opt->update([&] { return softmax_cross_entropy((*r.model)(Variable(x)), shard.y); });
}

Tensor params_of(const TrainingRun& r) { return r.model->arena().params().to(kFloat32); }

// The optimizer's state on every rank: whole (gathered) and this rank's part, by name.
Tensor state_named(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& name) {
  for (const auto& [n, t] : state)
    if (n == name) return t;
  return Tensor();
}

// Relative to 1 + |y| (test::worst_relative_difference): a centered RMSprop's momentum divides by
// a small root, which scales the rounding of the sums with it.

class ShardedState : public ::testing::TestWithParam<std::tuple<std::string, std::string, int, DType>> {};

// Sharded and unsharded steps see the same averaged gradients (summed in another order by the
// reduce-scatter) and apply the same elementwise rule, so the parameters agree to rounding; a
// 16-bit model's float32 masters do, and its weights are the masters rounded, on every rank.
TEST_P(ShardedState, MatchesTheUnshardedStepAndSplitsTheStateBytes) {
  const auto [comm_name, kind, stage, dtype] = GetParam();
  TrainingRun plain = make_run(comm_name, kind, 0, dtype), sharded = make_run(comm_name, kind, stage, dtype);
  EXPECT_EQ(sharded.opt->zero_stage(), stage);
  EXPECT_TRUE(sharded.opt->shards_optimizer_state());
  train(plain, 6, 3);
  train(sharded, 6, 3);
  comm::Communicator& comm = sharded.opt->communicator();
  const int size = comm.size();
  const std::string where = comm_name + "/" + kind + " stage " + std::to_string(stage) + " " +
                            std::string(dtype_name(dtype)) + " on " + std::to_string(size) + " ranks";
  // float32: the parameters to rounding; 16-bit: within a rounding of the 16-bit weights (the
  // masters are compared below, to float32's rounding).
  const double weights_tolerance = dtype == kFloat32 ? 1e-5 : 1e-2;
  EXPECT_LT(test::worst_relative_difference(params_of(sharded), params_of(plain)), weights_tolerance) << where;
  EXPECT_TRUE(test::same_on_every_rank(comm, sharded.model->arena().params())) << where;
  EXPECT_EQ(sharded.opt->t(), 6);

  // Every rank holds its part of each state tensor (and of the masters): the parts add up to the
  // unsharded bytes, and none is larger than the whole divided by the ranks, rounded up (stage
  // 2: per bucket, at most one element more per bucket).
  const std::int64_t whole = plain.opt->optimizer_state_bytes(), mine = sharded.opt->optimizer_state_bytes();
  Tensor total = Tensor::from_vector<std::int64_t>({mine}, {1});
  comm.allreduce(total, comm::ReduceOp::kSum);
  EXPECT_EQ(total.to_vector<std::int64_t>()[0], whole) << where;
  const std::int64_t n = plain.model->arena().numel(), per_element = whole / n;
  EXPECT_EQ(whole % n, 0);
  const std::int64_t slack = stage == 2 ? 8 : 0;  // the MLP's arena is at most 8 of these buckets
  EXPECT_LE(mine, per_element * ((n + size - 1) / size + slack)) << where;
  if (size > 1 && kind != "sgd") {
    EXPECT_LT(mine, whole);
  }

  // The gathered state is the unsharded one, on every rank, masters included.
  const auto gathered = sharded.opt->gathered_state();
  const auto reference = plain.opt->state();
  ASSERT_EQ(gathered.size(), reference.size());
  for (std::size_t i = 0; i < gathered.size(); ++i) {
    EXPECT_EQ(gathered[i].first, reference[i].first);
    // 1e-4 here, not the parameters' 1e-5: centred RMSprop's momentum holds g / sqrt(v - mean(g)^2)
    // before the learning rate scales it, and in the first steps that root is small, so the sum
    // order of the gradients (reduce-scatter against allreduce, inside nodes first) shows more.
    EXPECT_LT(test::worst_relative_difference(gathered[i].second, reference[i].second), 1e-4)
        << gathered[i].first << " " << where;
  }
  if (dtype != kFloat32) {
    // The masters: float32 rounding apart from the unsharded ones, and the model's weights are
    // exactly each rank's gathered masters rounded to 16 bits.
    const Tensor masters = state_named(gathered, "master");
    ASSERT_TRUE(masters.defined());
    EXPECT_LT(test::worst_relative_difference(masters, state_named(reference, "master")), 1e-5) << where;
    EXPECT_EQ(masters.to(dtype).to(kFloat32).to_vector<float>(), params_of(sharded).to_vector<float>()) << where;
    // This rank's masters are its part only.
    EXPECT_LE(state_named(sharded.opt->state(), "master").numel(), (n + size - 1) / size + slack) << where;
  }
}

INSTANTIATE_TEST_SUITE_P(Communicators, ShardedState,
                         ::testing::Combine(::testing::ValuesIn(dpl::test::host_communicator_names()),
                                            ::testing::Values("sgd", "momentum", "adamw", "adamw_groups", "rmsprop",
                                                              "adagrad"),
                                            ::testing::Values(1, 2), ::testing::Values(kFloat32)));
INSTANTIATE_TEST_SUITE_P(MixedPrecision, ShardedState,
                         ::testing::Combine(::testing::ValuesIn(dpl::test::host_communicator_names()),
                                            ::testing::Values("momentum", "adamw_groups"), ::testing::Values(1, 2),
                                            ::testing::Values(kBFloat16)));

// Stage 2's buckets reduce-scattered during backward and the same buckets reduce-scattered after
// it are the same collectives on the same values: the same parameters, bit for bit.
TEST(ZeroStage2, OverlapIsBitIdenticalToTheSameBucketsAfterBackward) {
  for (const DType dtype : {kFloat32, kBFloat16}) {
    TrainingRun during = make_run("naive", "adamw_groups", 2, dtype, true);
    TrainingRun after = make_run("naive", "adamw_groups", 2, dtype, false);
    train(during, 4, 11);
    train(after, 4, 11);
    EXPECT_EQ(params_of(during).to_vector<float>(), params_of(after).to_vector<float>()) << dtype_name(dtype);
    // During backward: one reduce-scatter per bucket, timed as under overlap, and no allreduce.
    const profile::PhaseTimer& timer = during.opt->timer();
    if (during.opt->communicator().size() > 1) {
      EXPECT_NE(timer.find("reduce_scatter/total"), nullptr);
      EXPECT_NE(timer.find("reduce_scatter/bucket2"), nullptr);
      EXPECT_NE(timer.find("allgather"), nullptr);
      EXPECT_EQ(timer.find("allreduce"), nullptr);
      EXPECT_EQ(after.opt->timer().find("reduce_scatter/total"), nullptr);
    }
    const auto a = during.opt->gathered_state(), b = after.opt->gathered_state();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
  }
}

// float16 loss scaling under sharding: an overflow on one rank only (an Inf in its loss at step 2)
// makes every rank skip that step and back off, as unsharded; the steps after agree too.
TEST(ZeroMixedPrecision, Float16OverflowOnOneRankSkipsTheSameStepsAsUnsharded) {
  for (const int stage : {0, 1, 2}) {
    TrainingRun r = make_run("naive", "adamw", stage, kFloat16);
    comm::Communicator& comm = r.opt->communicator();
    const auto shard = test::batch_shard(comm, 21, kBatch, kIn, kOut);
    const Tensor x = shard.x.to(kFloat16);
    auto& mixed = dynamic_cast<optim::MixedPrecision&>(r.opt->actual());
    std::vector<double> scales;
    std::vector<bool> skipped;
    for (int step = 0; step < 5; ++step) {
      r.opt->update([&] {
        Variable loss = softmax_cross_entropy((*r.model)(Variable(x)), shard.y);
        // The last rank's gradients overflow at step 2.
        if (step == 2 && comm.rank() == comm.size() - 1) loss = loss * 1e30f;
        return loss;
      });
      scales.push_back(mixed.loss_scale());
      skipped.push_back(mixed.last_step_skipped());
    }
    const std::vector<double> want_scales = {1024, 1024, 512, 512, 512};
    const std::vector<bool> want_skipped = {false, false, true, false, false};
    EXPECT_EQ(scales, want_scales) << "stage " << stage;
    EXPECT_EQ(skipped, want_skipped) << "stage " << stage;
    EXPECT_EQ(r.opt->t(), 4) << "stage " << stage;
    EXPECT_TRUE(test::same_on_every_rank(comm, r.model->arena().params())) << "stage " << stage;
  }
}

// Clipping by global norm under sharding: each rank's sum of squares of its shard, summed over the
// ranks, gives the norm of the whole averaged gradient on every rank, and each rank clips its
// shard by it: the same norms and parameters as clipping unsharded.
TEST(ZeroClipping, ClipsByTheGlobalNormAsUnsharded) {
  for (const DType dtype : {kFloat32, kBFloat16}) {
    for (const int stage : {1, 2}) {
      TrainingRun plain = make_run("naive", "adamw_groups", 0, dtype);
      TrainingRun sharded = make_run("naive", "adamw_groups", stage, dtype);
      auto plain_clip = optim::clip_gradients(*plain.opt, 0.05);
      auto sharded_clip = optim::clip_gradients(*sharded.opt, 0.05);
      comm::Communicator& comm = sharded.opt->communicator();
      const auto shard = test::batch_shard(comm, 13, kBatch, kIn, kOut);
      const Tensor x = shard.x.to(dtype);
      const std::string where = std::string(dtype_name(dtype)) + " stage " + std::to_string(stage);
      for (int step = 0; step < 4; ++step) {
        for (TrainingRun* r : {&plain, &sharded})
          r->opt->update([&] { return softmax_cross_entropy((*r->model)(Variable(x)), shard.y); });
        const double norm = sharded_clip->last_norm(), want = plain_clip->last_norm();
        EXPECT_GT(want, 0.05) << where << ": the test must clip";
        EXPECT_NEAR(norm, want, 1e-5 * want) << where << " step " << step;
        const Tensor n = Tensor::from_vector<float>({static_cast<float>(norm)}, {1});
        EXPECT_TRUE(test::same_on_every_rank(comm, n)) << where;
      }
      const Tensor a = state_named(sharded.opt->gathered_state(), dtype == kFloat32 ? "m" : "master");
      const Tensor b = state_named(plain.opt->state(), dtype == kFloat32 ? "m" : "master");
      EXPECT_LT(test::worst_relative_difference(a, b), 1e-5) << where;
      EXPECT_LT(test::worst_relative_difference(params_of(sharded), params_of(plain)), dtype == kFloat32 ? 1e-5 : 1e-2)
          << where;
    }
  }
}

// kStop under sharding: a NaN in one rank's data stops every rank with the same message.
TEST(ZeroNonFinite, ANaNOnOneRankStopsEveryRank) {
  for (const int stage : {1, 2}) {
    TrainingRun r = make_run("naive", "adamw", stage, kBFloat16);
    comm::Communicator& comm = r.opt->communicator();
    const auto shard = test::batch_shard(comm, 23, kBatch, kIn, kOut);
    Tensor x = shard.x.clone();
    if (comm.rank() == comm.size() - 1) x.set<float>({0, 3}, std::numeric_limits<float>::quiet_NaN());
    const Tensor x16 = x.to(kBFloat16);
    const std::string message = test::error_message(
        [&] { r.opt->update([&] { return softmax_cross_entropy((*r.model)(Variable(x16)), shard.y); }); });
    EXPECT_THAT(message, ::testing::HasSubstr("iteration 1: non-finite gradient (Inf or NaN)")) << "stage " << stage;
    EXPECT_THAT(message, ::testing::HasSubstr("on rank(s) " + std::to_string(comm.size() - 1))) << "stage " << stage;
  }
}

// Checkpoints: a 16-bit model's whole state (masters included) loads into a sharded optimizer of
// either stage, and a sharded one's gathered state into an unsharded one; each continues as the
// other does.
TEST(ZeroMixedPrecision, WholeAndShardedStatesLoadEitherWay) {
  for (const int stage : {1, 2}) {
    TrainingRun plain = make_run("naive", "adamw_groups", 0, kBFloat16);
    train(plain, 3, 5);
    TrainingRun sharded = make_run("naive", "adamw_groups", stage, kBFloat16);
    Tensor weights = sharded.model->arena().params();  // a handle on the arena's storage
    weights.copy_(plain.model->arena().params());
    sharded.opt->load_state(plain.opt->state(), plain.opt->state_scalars());
    train(plain, 3, 6);
    train(sharded, 3, 6);
    const auto a = sharded.opt->gathered_state(), b = plain.opt->state();
    EXPECT_LT(test::worst_relative_difference(state_named(a, "master"), state_named(b, "master")), 1e-5);
    EXPECT_EQ(sharded.opt->t(), plain.opt->t());

    // Back: the sharded run's gathered state into an unsharded optimizer.
    TrainingRun back = make_run("naive", "adamw_groups", 0, kBFloat16);
    Tensor back_weights = back.model->arena().params();
    back_weights.copy_(sharded.model->arena().params());
    back.opt->load_state(a, sharded.opt->state_scalars());
    train(back, 2, 7);
    train(sharded, 2, 7);
    EXPECT_LT(test::worst_relative_difference(state_named(sharded.opt->gathered_state(), "master"),
                                              state_named(back.opt->state(), "master")),
              1e-5)
        << "stage " << stage;
  }
}

// train::save_checkpoint of a sharded 16-bit run (stage 2) writes the whole state: the file loads
// into an unsharded optimizer and into a stage-1 one, and both continue as the saving run does.
TEST(ZeroCheckpoint, AShardedRunsFileLoadsUnshardedAndSharded) {
  TrainingRun saving = make_run("naive", "adamw_groups", 2, kBFloat16);
  comm::Communicator& comm = saving.opt->communicator();
  Tensor pid = Tensor::full({1}, static_cast<double>(::getpid()), TensorOptions(kInt64));
  comm.broadcast(pid, 0);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dpl_zero_checkpoint_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + ".safetensors"))
                               .string();
  train(saving, 3, 8);
  train::TrainingState state{saving.model.get(), saving.opt.get()};
  train::save_checkpoint(path, state, &comm);
  for (const int stage : {0, 1}) {
    TrainingRun loading = make_run("naive", "adamw_groups", stage, kBFloat16);
    train::TrainingState into{loading.model.get(), loading.opt.get()};
    train::load_checkpoint(path, into, &comm);
    EXPECT_EQ(params_of(loading).to_vector<float>(), params_of(saving).to_vector<float>()) << "stage " << stage;
    EXPECT_EQ(loading.opt->t(), 3);
    EXPECT_EQ(state_named(loading.opt->gathered_state(), "master").to_vector<float>(),
              state_named(saving.opt->gathered_state(), "master").to_vector<float>())
        << "stage " << stage;
    train(loading, 2, 9);
    TrainingRun again = make_run("naive", "adamw_groups", 2, kBFloat16);
    train::TrainingState again_state{again.model.get(), again.opt.get()};
    train::load_checkpoint(path, again_state, &comm);
    train(again, 2, 9);
    EXPECT_LT(test::worst_relative_difference(state_named(loading.opt->gathered_state(), "master"),
                                              state_named(again.opt->gathered_state(), "master")),
              1e-5)
        << "stage " << stage;
  }
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove(path);
}

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

  // Under MixedPrecision too, before the masters are touched: the run goes on unsharded.
  nn::MLP mixed_model(kUnits, kIn, kOut, gen);
  auto mixed_lamb = parallel::create_multi_node_optimizer(
      optim::mixed_precision(std::make_unique<optim::LAMB>(), kBFloat16), comm::create_communicator("naive"));
  mixed_lamb->setup(mixed_model);
  DPL_EXPECT_ERROR(mixed_lamb->set_zero_stage(2), ::testing::HasSubstr("not elementwise"));
  EXPECT_EQ(mixed_lamb->zero_stage(), 0);
  const auto mixed_shard = test::batch_shard(mixed_lamb->communicator(), 9, kBatch, kIn, kOut);
  const Tensor mixed_x = mixed_shard.x.to(kBFloat16);
  mixed_lamb->update([&] { return softmax_cross_entropy(mixed_model(Variable(mixed_x)), mixed_shard.y); });
  EXPECT_TRUE(test::same_on_every_rank(mixed_lamb->communicator(), mixed_model.arena().params()));
  EXPECT_EQ(mixed_lamb->optimizer_state_bytes() % mixed_model.arena().numel(), 0);

  auto adam = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm::create_communicator("naive"));
  adam->setup(model);
  adam->set_shard_optimizer_state(true);
  // A hook of one's own reads the whole gradient: refused without its sharded form.
  DPL_EXPECT_ERROR(adam->add_gradient_hook([](nn::ParameterArena&) {}),
                   ::testing::HasSubstr("a gradient hook without a sharded form would see only this rank's shard"));
  auto hooked = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm::create_communicator("naive"));
  hooked->add_gradient_hook([](nn::ParameterArena&) {});
  hooked->set_zero_stage(1);
  DPL_EXPECT_ERROR(hooked->setup(model), ::testing::HasSubstr("1 gradient hook(s) without a sharded form"));
  parallel::OverlapOptions overlap;
  overlap.enabled = true;
  DPL_EXPECT_ERROR(adam->set_overlap(overlap), ::testing::HasSubstr("sharded"));
  DPL_EXPECT_ERROR(adam->set_zero_stage(3),
                   ::testing::HasSubstr("expected 0 (off), 1 (sharded optimizer state) or 2 (and gradients"));
  DPL_EXPECT_ERROR(adam->set_zero_stage(-1), ::testing::HasSubstr("got -1"));
  EXPECT_EQ(adam->zero_stage(), 1);
  // A 16-bit model whose optimizer keeps no float32 masters cannot be sharded.
  nn::MLP half(kUnits, kIn, kOut, gen);
  for (auto& [name, var] : half.named_parameters()) {
    Variable v = var;
    v.set_data(v.data().to(kBFloat16));
  }
  auto bare = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.1f), comm::create_communicator("naive"));
  bare->set_zero_stage(1);
  DPL_EXPECT_ERROR(bare->setup(half),
                   ::testing::HasSubstr("expected a float32 model, or a 16-bit one under optim::MixedPrecision, got "
                                        "parameters of bfloat16"));
  // Nothing was left half done: the ranks still step together, and agree.
  const auto shard = test::batch_shard(adam->communicator(), 9, kBatch, kIn, kOut);
  adam->update([&] { return softmax_cross_entropy(model(Variable(shard.x)), shard.y); });
  EXPECT_TRUE(test::same_on_every_rank(adam->communicator(), model.arena().params()));
}

}  // namespace
