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

// The parameters, the state tensors, t() and Adam's step count: what the next update reads.
void expect_same_parameters_and_state(const TrainedRun& a, const TrainedRun& b) {
  const std::vector<float> pa = a.model->arena().params().to(kFloat32).to_vector<float>();
  const std::vector<float> pb = b.model->arena().params().to(kFloat32).to_vector<float>();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) ASSERT_EQ(pa[i], pb[i]) << "parameter element " << i;
  EXPECT_EQ(a.opt->t(), b.opt->t());
  const auto sa = a.opt->state_scalars(), sb = b.opt->state_scalars();
  if (sa.count("moment_steps")) {
    EXPECT_EQ(sa.at("moment_steps"), sb.at("moment_steps"));
  }
  const auto ta = a.opt->state(), tb = b.opt->state();
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t k = 0; k < ta.size(); ++k) {
    const std::vector<float> va = ta[k].second.to(kFloat32).to_vector<float>(), vb = tb[k].second.to(kFloat32).to_vector<float>();
    for (std::size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << ta[k].first << " element " << i;
  }
}

void expect_same_training(const TrainedRun& a, const TrainedRun& b) {
  expect_same_parameters_and_state(a, b);
  EXPECT_EQ(a.opt->iteration(), b.opt->iteration());
  EXPECT_EQ(a.opt->skipped_steps(), b.opt->skipped_steps());
  EXPECT_EQ(a.opt->state_scalars(), b.opt->state_scalars());
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

// Replays under kStop whose verdicts are read one step late (finish_replay_deferred), as
// CapturedStep runs them; settled after the last step. A stop is caught, and the run's state
// kept, to compare with where ordinary steps stop.
struct DeferredRun {
  TrainedRun run;
  std::string error;
  int stopped_at = -1;  // the step whose finish threw, or -1
};

DeferredRun train_deferred(const MakeOptimizer& make, int steps, int nan_step = -1) {
  Generator gen(7);
  DeferredRun d{{std::make_unique<nn::MLP>(kUnits, kIn, kOut, gen), make()}, {}, -1};
  optim::Optimizer& opt = *d.run.opt;
  opt.setup(*d.run.model);
  const Problem prob = make_problem(3);
  Tensor x = prob.x.clone();
  const auto loss_fn = [&] { return softmax_cross_entropy((*d.run.model)(Variable(x)), prob.y); };
  int s = 0;
  try {
    for (; s < steps; ++s) {
      x.copy_(prob.x);
      if (s == nan_step) x.set<float>({0, 0}, std::numeric_limits<float>::quiet_NaN());
      opt.set_lr(0.05f / static_cast<float>(s + 1));
      if (s == 0) {
        opt.update(loss_fn);
        opt.set_replay_mode(true);
        EXPECT_TRUE(opt.can_defer_verdict());
        continue;
      }
      opt.prepare_replay();
      const Variable loss = opt.update(loss_fn);
      opt.finish_replay_deferred(loss.data().clone());
      EXPECT_TRUE(opt.verdict_pending());
    }
    opt.settle_replay();
    EXPECT_FALSE(opt.verdict_pending());
  } catch (const Error& e) {
    d.error = e.what();
    d.stopped_at = s;
  }
  return d;
}

// A fresh optimizer of `make`, set up on a model and in replay mode under kStop.
std::unique_ptr<optim::Optimizer> in_replay_mode(const MakeOptimizer& make, nn::MLP& model) {
  auto opt = make();
  opt->setup(model);
  opt->set_replay_mode(true);
  return opt;
}

TEST_P(ReplayMode, DeferredVerdictsTrainBitIdenticallyWhereTheOptimizerCanDeferThem) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  const auto probe = in_replay_mode(GetParam().make, model);
  if (!probe->can_defer_verdict()) {
    // A wrapper reads the verdict itself, and says so rather than be half-deferred.
    EXPECT_THAT(GetParam().name, HasSubstr("MixedPrecision"));
    DPL_EXPECT_ERROR(probe->finish_replay_deferred(Tensor()), HasSubstr("can_defer_verdict"));
    return;
  }
  const TrainedRun plain = train(GetParam().make, false, 6, -1, optim::NonFinitePolicy::kStop);
  const DeferredRun deferred = train_deferred(GetParam().make, 6);
  EXPECT_EQ(deferred.error, "");
  expect_same_training(plain, deferred.run);
}

TEST_P(ReplayMode, ADeferredNonFiniteStepStopsOneStepLaterWithNothingChanged) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  if (!in_replay_mode(GetParam().make, model)->can_defer_verdict()) return;  // the test above covers the wrappers
  // Ordinary steps stop at step 2 (iteration 3) with the state of steps 0 and 1.
  const TrainedRun before = train(GetParam().make, false, 2, -1, optim::NonFinitePolicy::kStop);
  const std::string plain_message =
      test::error_message([&] { train(GetParam().make, false, 5, 2, optim::NonFinitePolicy::kStop); });
  // Deferred: step 3's finish reads step 2's verdict and throws; step 3 ran, and skipped too.
  const DeferredRun deferred = train_deferred(GetParam().make, 5, 2);
  EXPECT_EQ(deferred.stopped_at, 3);
  EXPECT_THAT(deferred.error, AllOf(HasSubstr("iteration 3: non-finite gradient"), HasSubstr("the loss was NaN"),
                                    HasSubstr("not located")));
  EXPECT_THAT(plain_message, HasSubstr("iteration 3: non-finite gradient"));
  expect_same_parameters_and_state(before, deferred.run);
  EXPECT_EQ(deferred.run.opt->iteration(), 3);  // the failing iteration counted, as update() leaves it
  EXPECT_FALSE(deferred.run.opt->verdict_pending());  // read, and reported once
}

TEST(ReplayMode, ANonFiniteLastStepIsReportedBySettling) {
  const MakeOptimizer make = [] { return std::make_unique<optim::MomentumSGD>(0.1f, 0.9f); };
  const DeferredRun deferred = train_deferred(make, 4, 3);
  EXPECT_EQ(deferred.stopped_at, 4);  // the loop had ended: settle_replay() threw
  EXPECT_THAT(deferred.error, HasSubstr("iteration 4: non-finite gradient"));
  const TrainedRun before = train(make, false, 3, -1, optim::NonFinitePolicy::kStop);
  expect_same_parameters_and_state(before, deferred.run);
}

TEST(ReplayMode, LoadingStateSettlesAPendingVerdictFirst) {
  Generator gen(7);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::Adam opt(1e-2f);
  opt.setup(model);
  const Problem prob = make_problem(3);
  Tensor x = prob.x.clone();
  const auto loss_fn = [&] { return softmax_cross_entropy(model(Variable(x)), prob.y); };
  opt.update(loss_fn);
  const auto tensors = opt.state();
  std::vector<std::pair<std::string, Tensor>> saved;
  for (const auto& [name, t] : tensors) saved.emplace_back(name, t.clone());
  const auto scalars = opt.state_scalars();
  opt.set_replay_mode(true);
  const auto replay = [&] {
    opt.prepare_replay();
    const Variable loss = opt.update(loss_fn);
    opt.finish_replay_deferred(loss.data().clone());
  };
  // A finite pending step: read, then the loaded counters stand as loaded.
  replay();
  ASSERT_TRUE(opt.verdict_pending());
  opt.load_state(saved, scalars);
  EXPECT_FALSE(opt.verdict_pending());
  EXPECT_EQ(opt.state_scalars(), scalars);
  // A non-finite pending step: loading reports it rather than fold it into the loaded counters.
  x.set<float>({0, 0}, std::numeric_limits<float>::quiet_NaN());
  replay();
  DPL_EXPECT_ERROR(opt.load_state(saved, scalars), HasSubstr("non-finite gradient"));
  EXPECT_FALSE(opt.verdict_pending());
}

std::unique_ptr<optim::Optimizer> with_decay(std::unique_ptr<optim::Optimizer> o) {
  o->set_weight_decay(1e-3f);
  return o;
}

// Groups whose values differ per step (each group's row of the device values): 1-D parameters
// without decay at twice the lr, and the output layer's weight at a fifth of it.
std::unique_ptr<optim::Optimizer> with_groups(std::unique_ptr<optim::Optimizer> o) {
  o->set_weight_decay(1e-3f);
  o->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f).lr(2.f * o->lr()));
  o->add_param_group(
      optim::ParamGroup([](const std::string&, const Shape& s) { return s.size() == 2 && s[0] == kOut; }, "output")
          .lr(o->lr() / 5));
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ReplayMode,
    ::testing::Values(Case{"SGD", [] { return with_decay(std::make_unique<optim::SGD>(0.1f)); }},
                      Case{"MomentumSGD", [] { return with_decay(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f)); }},
                      Case{"Adam", [] { return with_decay(std::make_unique<optim::Adam>(1e-2f)); }},
                      Case{"AdamW", [] { return with_decay(std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-2f))); }},
                      Case{"RMSpropCentered",
                           [] {
                             return with_decay(std::make_unique<optim::RMSprop>(
                                 optim::RMSpropOptions(1e-2f).momentum(0.5f).centered(true)));
                           }},
                      Case{"Adagrad",
                           [] {
                             return with_decay(
                                 std::make_unique<optim::Adagrad>(optim::AdagradOptions(5e-2f).lr_decay(0.1f)));
                           }},
                      Case{"LAMB", [] { return with_decay(std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f))); }},
                      Case{"LARS", [] { return with_decay(std::make_unique<optim::LARS>(optim::LARSOptions(0.1f))); }},
                      Case{"AdamWGroups",
                           [] { return with_groups(std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-2f))); }},
                      Case{"AdagradGroups",
                           [] { return with_groups(std::make_unique<optim::Adagrad>(optim::AdagradOptions(5e-2f))); }},
                      Case{"LAMBGroups", [] { return with_groups(std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f))); }},
                      Case{"LARSGroups", [] { return with_groups(std::make_unique<optim::LARS>(optim::LARSOptions(0.1f))); }},
                      Case{"MixedPrecisionBFloat16MomentumGroups",
                           [] {
                             return with_groups(optim::mixed_precision(
                                 std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), kBFloat16));
                           }},
                      Case{"MixedPrecisionBFloat16LAMB",
                           [] { return optim::mixed_precision(std::make_unique<optim::LAMB>(), kBFloat16); }},
                      Case{"MixedPrecisionFloat32Adam",
                           [] { return optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat32); }},
                      Case{"MixedPrecisionBFloat16Momentum",
                           [] {
                             return optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f),
                                                           kBFloat16);
                           }}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// float16 with loss scaling in replay mode: the scale the recorded step multiplies the loss by and
// divides the gradients by is read from the device, written before each replay, and changed on
// the host after it as in ordinary steps. A growth interval of 2 makes it grow twice in 7 steps,
// and the NaN step makes it back off, so a replay that used a stale scale would differ.
MakeOptimizer float16_momentum() {
  return [] {
    optim::LossScaling scaling;
    scaling.init_scale = 1024.0;
    scaling.growth_interval = 2;
    return optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), kFloat16, scaling);
  };
}

double loss_scale_of(const TrainedRun& r) { return r.opt->state_scalars().at("loss_scale"); }

TEST(ReplayMode, Float16LossScalingTrainsBitIdenticallyThroughGrowthAndBackoff) {
  const TrainedRun plain = train(float16_momentum(), false, 7, 3);
  const TrainedRun replayed = train(float16_momentum(), true, 7, 3);
  EXPECT_TRUE(replayed.opt->replay_mode());
  EXPECT_EQ(replayed.opt->skipped_steps(), 1);
  // Steps 0-1 good: 2048; 2 good, 3 overflowed: 1024; 4-5 good: 2048; 6 good.
  EXPECT_EQ(loss_scale_of(plain), 2048.0);
  expect_same_training(plain, replayed);
}

TEST(ReplayMode, Float16ReplaysUseTheScaleOfTheirOwnStep) {
  // A first scale so large that the scaled gradients overflow float16: steps are skipped, each
  // halving the scale, until it fits. A replay that kept an earlier step's scale would go on
  // overflowing (scaling and unscaling by one stale value agree with each other otherwise).
  const MakeOptimizer make = [] {
    optim::LossScaling scaling;
    scaling.init_scale = 16777216.0;  // 2^24
    return optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.1f, 0.9f), kFloat16, scaling);
  };
  const int steps = 30;
  const TrainedRun plain = train(make, false, steps);
  const TrainedRun replayed = train(make, true, steps);
  ASSERT_GT(plain.opt->skipped_steps(), 3);
  ASSERT_LT(plain.opt->skipped_steps(), steps - 3);
  expect_same_training(plain, replayed);
}

TEST(ReplayMode, Float16OrdinaryStepInBetweenKeepsTheScale) {
  const TrainedRun plain = train(float16_momentum(), false, 7, 2);
  const TrainedRun replayed = train(float16_momentum(), true, 7, 2, optim::NonFinitePolicy::kSkip, 4);
  expect_same_training(plain, replayed);
}

TEST(ReplayMode, Float16UnderTheStopPolicySkipsOverflowsAsOrdinaryStepsDo) {
  // An overflow is loss scaling's to skip: float16 never stops on it, recorded or not.
  const TrainedRun plain = train(float16_momentum(), false, 5, 2, optim::NonFinitePolicy::kStop);
  const TrainedRun replayed = train(float16_momentum(), true, 5, 2, optim::NonFinitePolicy::kStop);
  EXPECT_EQ(replayed.opt->skipped_steps(), 1);
  expect_same_training(plain, replayed);
}

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
  hooked.add_gradient_hook([](nn::ParameterArena&) {});  // may read back: not device-only
  hooked.setup(model);
  EXPECT_THAT(hooked.replay_refusal(), HasSubstr("gradient hook that is not device-only"));
  DPL_EXPECT_ERROR(hooked.set_replay_mode(true), AllOf(HasSubstr("cannot run a recorded step"), HasSubstr("hook")));
  EXPECT_FALSE(hooked.replay_mode());
  // Clipping keeps its norm and its decision on the device: a recorded step may include it.
  optim::SGD clipped(0.1f);
  optim::clip_gradients(clipped, 1.0);
  clipped.setup(model);
  EXPECT_EQ(clipped.replay_refusal(), "");

  // float16's loss scale lives on the device in replay mode: recordable.
  auto half = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16);
  half->setup(model);
  EXPECT_EQ(half->replay_refusal(), "");

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

}  // namespace
