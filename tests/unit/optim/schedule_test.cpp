// Learning-rate schedules (include/dpl/optim/schedule.hpp) against values worked out by hand at
// their boundaries: the first iteration, the end of a warmup, each milestone, the last iteration
// and after it; and every bad argument named with its schedule and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace optim;

constexpr double kPi = 3.14159265358979323846;

TEST(Schedule, ConstantIsTheSameEverywhere) {
  const ConstantLr s(0.1);
  EXPECT_EQ(s.lr_at(0), 0.1);
  EXPECT_EQ(s.lr_at(123456789), 0.1);
}

TEST(Schedule, StepDecayMultipliesByGammaEveryStep) {
  const StepDecay s(0.1, 0.5, 10);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(19), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(20), 0.025);
  EXPECT_DOUBLE_EQ(s.lr_at(35), 0.0125);
}

TEST(Schedule, MultiStepDecayAtEachMilestone) {
  const MultiStepDecay s(1.0, 0.1, {5, 8});
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(7), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(8), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.01);
  EXPECT_DOUBLE_EQ(MultiStepDecay(0.3, 0.1, {}).lr_at(50), 0.3);
}

TEST(Schedule, ExponentialShiftStopsAtItsBound) {
  const ExponentialShift down(0.1, 0.5, 1, 0.02);
  EXPECT_DOUBLE_EQ(down.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(down.lr_at(1), 0.05);
  EXPECT_DOUBLE_EQ(down.lr_at(2), 0.025);
  EXPECT_DOUBLE_EQ(down.lr_at(3), 0.02);  // 0.0125 is below the bound
  EXPECT_DOUBLE_EQ(down.lr_at(500), 0.02);
  const ExponentialShift up(0.01, 2.0, 10, 0.05);
  EXPECT_DOUBLE_EQ(up.lr_at(9), 0.01);
  EXPECT_DOUBLE_EQ(up.lr_at(10), 0.02);
  EXPECT_DOUBLE_EQ(up.lr_at(29), 0.04);
  EXPECT_DOUBLE_EQ(up.lr_at(30), 0.05);  // 0.08 is above the bound
  const ExponentialShift unbounded(1.0, 0.9, 100);
  EXPECT_DOUBLE_EQ(unbounded.lr_at(299), 0.81);
  EXPECT_DOUBLE_EQ(unbounded.lr_at(300), 0.729);
}

TEST(Schedule, LinearShiftReachesItsEndAndStays) {
  const LinearShift s(0.1, 0.0, 100);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(25), 0.075);
  EXPECT_DOUBLE_EQ(s.lr_at(50), 0.05);
  EXPECT_EQ(s.lr_at(100), 0.0);
  EXPECT_EQ(s.lr_at(5000), 0.0);
  EXPECT_DOUBLE_EQ(LinearShift(0.01, 0.03, 4).lr_at(1), 0.015);  // rising works too
}

TEST(Schedule, CosineAnnealingFromBaseToFinal) {
  const CosineAnnealing s(0.1, 0.001, 100);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(25), 0.001 + 0.099 * (1.0 + std::cos(kPi / 4)) / 2);
  EXPECT_DOUBLE_EQ(s.lr_at(50), 0.0505);
  EXPECT_DOUBLE_EQ(s.lr_at(99), 0.001 + 0.099 * (1.0 + std::cos(kPi * 0.99)) / 2);
  EXPECT_DOUBLE_EQ(s.lr_at(100), 0.001);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.001);
}

TEST(Schedule, WarmupRisesToThePeakThenRunsTheScheduleOnItsOwnClock) {
  const LinearWarmup s = with_warmup(CosineAnnealing(0.1, 0.0, 100), 0.0, 10);
  EXPECT_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 0.09);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.1);   // warmup end: the cosine's first value
  EXPECT_DOUBLE_EQ(s.lr_at(60), 0.05);  // the cosine at 50
  EXPECT_NEAR(s.lr_at(110), 0.0, 1e-18);
  EXPECT_NEAR(s.lr_at(10000), 0.0, 1e-18);

  // Milestones count from the warmup's end.
  const LinearWarmup steps = with_warmup(MultiStepDecay(0.1, 0.1, {100}), 0.01, 5);
  EXPECT_DOUBLE_EQ(steps.lr_at(0), 0.01);
  EXPECT_DOUBLE_EQ(steps.lr_at(4), 0.01 + 0.09 * 4 / 5);
  EXPECT_DOUBLE_EQ(steps.lr_at(5), 0.1);
  EXPECT_DOUBLE_EQ(steps.lr_at(104), 0.1);
  EXPECT_DOUBLE_EQ(steps.lr_at(105), 0.01);

  // No warmup: the schedule itself.
  const LinearWarmup none = with_warmup(StepDecay(0.2, 0.5, 3), 0.0, 0);
  EXPECT_DOUBLE_EQ(none.lr_at(0), 0.2);
  EXPECT_DOUBLE_EQ(none.lr_at(3), 0.1);
}

TEST(Schedule, EpochsAreIterationsTimesIterationsPerEpoch) {
  const std::int64_t per_epoch = 100;
  const StepDecay every_three_epochs(0.1, 0.1, 3 * per_epoch);
  EXPECT_DOUBLE_EQ(every_three_epochs.lr_at_epoch(0, per_epoch), 0.1);
  EXPECT_DOUBLE_EQ(every_three_epochs.lr_at_epoch(2, per_epoch), 0.1);
  EXPECT_DOUBLE_EQ(every_three_epochs.lr_at_epoch(3, per_epoch), 0.01);
  EXPECT_EQ(every_three_epochs.lr_at_epoch(4, per_epoch), every_three_epochs.lr_at(400));
}

// A resumed run asks for iterations out of order, and a fresh schedule object: both must give the
// values the uninterrupted run saw.
TEST(Schedule, IsAPureFunctionOfTheIteration) {
  const LinearWarmup s = with_warmup(ExponentialShift(0.1, 0.7, 7, 0.001), 0.001, 13);
  std::vector<double> forward;
  for (std::int64_t i = 0; i < 200; ++i) forward.push_back(s.lr_at(i));
  for (std::int64_t i = 199; i >= 0; --i) EXPECT_EQ(s.lr_at(i), forward[static_cast<std::size_t>(i)]) << i;
  const LinearWarmup again = with_warmup(ExponentialShift(0.1, 0.7, 7, 0.001), 0.001, 13);
  EXPECT_EQ(again.lr_at(150), forward[150]);
}

TEST(Schedule, ApplySetsTheOptimizersRate) {
  SGD sgd(1.0f);
  Adam adam;
  const StepDecay s(0.1, 0.5, 10);
  s.apply(sgd, 10);
  EXPECT_EQ(sgd.lr(), 0.05f);
  s.apply(adam, 25);
  EXPECT_EQ(adam.lr(), 0.025f);
}

TEST(Schedule, BadArgumentsNameTheScheduleAndTheValue) {
  DPL_EXPECT_ERROR(StepDecay(0.1, 0.5, 10).lr_at(-1), HasSubstr("StepDecay: expected an iteration >= 0, got -1"));
  DPL_EXPECT_ERROR(CosineAnnealing(0.1, 0.0, 5).lr_at(-3), HasSubstr("CosineAnnealing: expected an iteration >= 0, got -3"));
  DPL_EXPECT_ERROR(StepDecay(0.1, 0.5, 0), HasSubstr("StepDecay: expected the step size >= 1 iteration, got 0"));
  DPL_EXPECT_ERROR(StepDecay(0.1, 0.0, 10), HasSubstr("StepDecay: expected gamma to be finite and > 0, got 0"));
  DPL_EXPECT_ERROR(StepDecay(0.1, -0.5, 10), HasSubstr("StepDecay: expected gamma to be finite and > 0, got -0.5"));
  DPL_EXPECT_ERROR(StepDecay(-0.1, 0.5, 10), HasSubstr("StepDecay: expected the base rate to be finite and >= 0, got -0.1"));
  DPL_EXPECT_ERROR(StepDecay(NAN, 0.5, 10), AllOf(HasSubstr("StepDecay"), HasSubstr("nan")));
  DPL_EXPECT_ERROR(MultiStepDecay(0.1, 0.0, {5}), HasSubstr("MultiStepDecay: expected gamma to be finite and > 0, got 0"));
  DPL_EXPECT_ERROR(MultiStepDecay(0.1, 0.1, {0}), HasSubstr("MultiStepDecay: expected every milestone >= 1 iteration, got 0"));
  DPL_EXPECT_ERROR(MultiStepDecay(0.1, 0.1, {5, 5}),
                   HasSubstr("MultiStepDecay: expected strictly increasing milestones, got 5 after 5"));
  DPL_EXPECT_ERROR(ExponentialShift(0.1, 0.0), HasSubstr("ExponentialShift: expected the rate factor to be finite and > 0, got 0"));
  DPL_EXPECT_ERROR(ExponentialShift(0.1, 0.5, 0), HasSubstr("ExponentialShift: expected the interval >= 1 iteration, got 0"));
  DPL_EXPECT_ERROR(ExponentialShift(0.1, 0.5, 1, -1.0), HasSubstr("ExponentialShift: expected the bound to be finite and >= 0, got -1"));
  DPL_EXPECT_ERROR(LinearShift(0.1, 0.0, 0), HasSubstr("LinearShift: expected the length >= 1 iteration, got 0"));
  DPL_EXPECT_ERROR(LinearShift(0.1, -2.0, 10), HasSubstr("LinearShift: expected the end rate to be finite and >= 0, got -2"));
  DPL_EXPECT_ERROR(CosineAnnealing(0.1, 0.0, -4), HasSubstr("CosineAnnealing: expected the length >= 1 iteration, got -4"));
  DPL_EXPECT_ERROR(CosineAnnealing(0.1, -1.0, 4), HasSubstr("CosineAnnealing: expected the final rate to be finite and >= 0, got -1"));
  DPL_EXPECT_ERROR(ConstantLr(-1.0), HasSubstr("ConstantLr: expected the rate to be finite and >= 0, got -1"));
  DPL_EXPECT_ERROR(LinearWarmup(nullptr, 0.0, 5), HasSubstr("LinearWarmup: the schedule after the warmup is null"));
  DPL_EXPECT_ERROR(with_warmup(ConstantLr(0.1), 0.0, -1),
                   HasSubstr("LinearWarmup: expected the warmup length >= 0 iterations, got -1"));
  DPL_EXPECT_ERROR(with_warmup(ConstantLr(0.1), -0.5, 5), HasSubstr("LinearWarmup: expected the start rate to be finite and >= 0, got -0.5"));
  DPL_EXPECT_ERROR(with_warmup(ConstantLr(0.1), 0.0, 5).lr_at(-7), HasSubstr("LinearWarmup: expected an iteration >= 0, got -7"));
  DPL_EXPECT_ERROR(ConstantLr(0.1).lr_at_epoch(-1, 10), HasSubstr("ConstantLr: expected an epoch >= 0, got -1"));
  DPL_EXPECT_ERROR(ConstantLr(0.1).lr_at_epoch(1, 0), HasSubstr("ConstantLr: expected iterations_per_epoch >= 1, got 0"));
  // A growing rate that overflows is caught where it happens, not handed to the optimizer.
  DPL_EXPECT_ERROR(ExponentialShift(1.0, 10.0).lr_at(400),
                   AllOf(HasSubstr("ExponentialShift: the rate at iteration 400 is inf"), HasSubstr("not a finite value")));
}

}  // namespace
}  // namespace dpl
