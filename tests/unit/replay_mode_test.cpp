// Replay mode of the optimizers (the protocol a recorded CUDA graph step runs under), on the CPU:
// a "replay" here runs the recorded calls again between prepare_replay() and finish_replay(),
// which is what a graph replay does with the recorded kernels. The results must be
// bit-identical to ordinary steps, with per-step values (a changing learning rate, Adam's bias
// correction) and non-finite steps (skipped on the flag the kernel reads, or stopping).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::int64_t kBatch = 8, kIn = 6, kUnits = 10, kOut = 3;

struct Problem {
  Tensor x, y;
};

Problem make_problem(std::uint64_t seed) {
  Generator gen(seed);
  Problem p{Tensor::normal({kBatch, kIn}, 0.f, 1.f, gen), Tensor::empty({kBatch}, kInt32)};
  for (std::int64_t i = 0; i < kBatch; ++i) p.y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(kOut)));
  return p;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>()>;

// One run of `steps` steps: the first ordinary, the rest in replay mode when `replay` is set.
// Step `nan_step` (if >= 0) gets a NaN input; the learning rate changes every step.
struct TrainedRun {
  std::unique_ptr<nn::MLP> model;
  std::unique_ptr<optim::Optimizer> opt;
};

TrainedRun train(const MakeOptimizer& make, bool replay, int steps, int nan_step = -1,
          optim::NonFinitePolicy policy = optim::NonFinitePolicy::kSkip, int ordinary_step = -1) {
  Generator gen(7);
  TrainedRun r{std::make_unique<nn::MLP>(kUnits, kIn, kOut, gen), make()};
  r.opt->set_non_finite_policy(policy);
  r.opt->setup(*r.model);
  const Problem prob = make_problem(3);
  Tensor x = prob.x.clone();
  const DType dtype = r.model->arena().params().dtype();  // bfloat16 under MixedPrecision
  const auto loss_fn = [&] { return softmax_cross_entropy((*r.model)(Variable(x.to(dtype))), prob.y); };
  for (int s = 0; s < steps; ++s) {
    x.copy_(prob.x);
    if (s == nan_step) x.set<float>({0, 0}, std::numeric_limits<float>::quiet_NaN());
    r.opt->set_lr(0.05f / static_cast<float>(s + 1));
    if (!replay || s == 0) {
      r.opt->update(loss_fn);
      if (replay) r.opt->set_replay_mode(true);
      continue;
    }
    if (s == ordinary_step) {
      // One step out of replay mode in between (CapturedStep's batch of another shape).
      r.opt->set_replay_mode(false);
      r.opt->update(loss_fn);
      r.opt->set_replay_mode(true);
      continue;
    }
    r.opt->prepare_replay();
    r.opt->update(loss_fn);  // what the recorded graph would run
    r.opt->finish_replay();
  }
  return r;
}

void expect_same_training(const TrainedRun& a, const TrainedRun& b) {
  const std::vector<float> pa = a.model->arena().params().to(kFloat32).to_vector<float>();
  const std::vector<float> pb = b.model->arena().params().to(kFloat32).to_vector<float>();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) ASSERT_EQ(pa[i], pb[i]) << "parameter element " << i;
  EXPECT_EQ(a.opt->t(), b.opt->t());
  EXPECT_EQ(a.opt->iteration(), b.opt->iteration());
  EXPECT_EQ(a.opt->skipped_steps(), b.opt->skipped_steps());
  const auto sa = a.opt->state_scalars(), sb = b.opt->state_scalars();
  EXPECT_EQ(sa, sb);
  const auto ta = a.opt->state(), tb = b.opt->state();
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t k = 0; k < ta.size(); ++k) {
    const std::vector<float> va = ta[k].second.to(kFloat32).to_vector<float>(), vb = tb[k].second.to(kFloat32).to_vector<float>();
    for (std::size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << ta[k].first << " element " << i;
  }
}

struct Case {
  std::string name;
  MakeOptimizer make;
};

class ReplayMode : public ::testing::TestWithParam<Case> {};

TEST_P(ReplayMode, StepsAreBitIdenticalToOrdinaryOnes) {
  const TrainedRun plain = train(GetParam().make, false, 6);
  const TrainedRun replayed = train(GetParam().make, true, 6);
  EXPECT_TRUE(replayed.opt->replay_mode());
  expect_same_training(plain, replayed);
  EXPECT_EQ(replayed.opt->t(), 6);
}

TEST_P(ReplayMode, AnOrdinaryStepInBetweenUsesItsOwnValues) {
  const TrainedRun plain = train(GetParam().make, false, 7);
  const TrainedRun replayed = train(GetParam().make, true, 7, -1, optim::NonFinitePolicy::kSkip, 3);
  expect_same_training(plain, replayed);
}

TEST_P(ReplayMode, ANonFiniteStepIsSkippedOnTheFlagAndCountedAsInOrdinarySteps) {
  const TrainedRun plain = train(GetParam().make, false, 6, 3);
  const TrainedRun replayed = train(GetParam().make, true, 6, 3);
  EXPECT_EQ(replayed.opt->skipped_steps(), 1);
  EXPECT_EQ(replayed.opt->t(), 5);
  expect_same_training(plain, replayed);
}

TEST_P(ReplayMode, ANonFiniteStepStopsWithTheOrdinaryMessage) {
  std::string plain_message, replay_message;
  plain_message = test::error_message([&] { train(GetParam().make, false, 5, 2, optim::NonFinitePolicy::kStop); });
  replay_message = test::error_message([&] { train(GetParam().make, true, 5, 2, optim::NonFinitePolicy::kStop); });
  EXPECT_THAT(replay_message, AllOf(HasSubstr("iteration 3"), HasSubstr("non-finite gradient")));
  EXPECT_EQ(replay_message, plain_message);
}

std::unique_ptr<optim::Optimizer> with_decay(std::unique_ptr<optim::Optimizer> o) {
  o->set_weight_decay(1e-3f);
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ReplayMode,
    ::testing::Values(Case{"SGD", [] { return with_decay(std::make_unique<optim::SGD>(0.1f)); }},
                      Case{"MomentumSGD", [] { return with_decay(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f)); }},
                      Case{"Adam", [] { return with_decay(std::make_unique<optim::Adam>(1e-2f)); }},
                      Case{"MixedPrecisionFloat32Adam",
                           [] { return optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat32); }},
                      Case{"MixedPrecisionBFloat16Momentum",
                           [] {
                             return optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f),
                                                           kBFloat16);
                           }}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(ReplayMode, CheckOffRunsWithoutAFlag) {
  const MakeOptimizer make = [] { return std::make_unique<optim::Adam>(1e-2f); };
  const TrainedRun plain = train(make, false, 5, -1, optim::NonFinitePolicy::kOff);
  const TrainedRun replayed = train(make, true, 5, -1, optim::NonFinitePolicy::kOff);
  expect_same_training(plain, replayed);
}

TEST(ReplayMode, IsRefusedWithTheReason) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);

  optim::SGD hooked(0.1f);
  optim::clip_gradients(hooked, 1.0);
  hooked.setup(model);
  EXPECT_THAT(hooked.replay_refusal(), HasSubstr("gradient hooks"));
  DPL_EXPECT_ERROR(hooked.set_replay_mode(true), AllOf(HasSubstr("cannot run a recorded step"), HasSubstr("hooks")));
  EXPECT_FALSE(hooked.replay_mode());

  auto half = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16);
  half->setup(model);
  EXPECT_THAT(half->replay_refusal(), HasSubstr("float16 loss scaling"));
  DPL_EXPECT_ERROR(half->set_replay_mode(true), HasSubstr("float16 loss scaling"));

  // An optimizer of the user's own, whose step() knows nothing of replay mode.
  struct Custom : optim::Optimizer {
    float lr() const override { return 0.1f; }
    void set_lr(float) override {}
    void step(nn::ParameterArena&) override {}
  };
  Custom custom;
  EXPECT_THAT(custom.replay_refusal(), HasSubstr("replay_values() is empty"));
}

TEST(ReplayMode, CallsOutsideReplayModeAreRefused) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD sgd(0.1f);
  sgd.setup(model);
  DPL_EXPECT_ERROR(sgd.prepare_replay(), HasSubstr("not in replay mode"));
  DPL_EXPECT_ERROR(sgd.finish_replay(), HasSubstr("not in replay mode"));
  sgd.set_replay_mode(true);
  sgd.set_replay_mode(false);
  EXPECT_FALSE(sgd.replay_mode());
  DPL_EXPECT_ERROR(sgd.prepare_replay(), HasSubstr("not in replay mode"));
}

TEST(CapturedStep, RefusesBadArgumentsAndACpuModel) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD sgd(0.1f);
  sgd.setup(model);
  const auto loss = [&](const std::vector<Tensor>& in) { return softmax_cross_entropy(model(Variable(in[0])), in[1]); };
  DPL_EXPECT_ERROR(train::CapturedStep(sgd, loss, 0), HasSubstr("warmup_steps >= 1"));
  DPL_EXPECT_ERROR(train::CapturedStep(sgd, nullptr), HasSubstr("expected a loss function"));

  train::CapturedStep step(sgd, loss, 1);
  const Problem prob = make_problem(2);
  step.update({prob.x, prob.y});  // the warm-up step runs as usual
  EXPECT_EQ(step.unrecorded_steps(), 1);
  DPL_EXPECT_ERROR(step.update({prob.x, prob.y}), AllOf(HasSubstr("needs a model on a GPU"), HasSubstr("cpu")));
  EXPECT_FALSE(step.captured());
  EXPECT_FALSE(sgd.replay_mode());
}

TEST(Observation, RecordsTensorsAndRefusesNumbersWhileRecording) {
  train::Observation obs;
  std::vector<std::pair<std::string, Tensor>> recorded;
  obs.record_into(&recorded);
  const Tensor v = Tensor::full({}, 2.5);
  obs.observe("main/accuracy", v);
  ASSERT_EQ(recorded.size(), 1u);
  EXPECT_EQ(recorded[0].first, "main/accuracy");
  DPL_EXPECT_ERROR(obs.observe("main/count", 3.0), AllOf(HasSubstr("main/count"), HasSubstr("host number")));
  obs.record_into(nullptr);
  EXPECT_TRUE(obs.take_means().empty());  // nothing was added up while recording
  obs.observe("main/accuracy", v);
  EXPECT_EQ(obs.take_means().at(0).second, 2.5);
}

}  // namespace
