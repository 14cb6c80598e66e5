// Triggers: when an extension runs, counted in iterations or epochs, or once at the end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dpl/train/trigger.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl::train;
using ::testing::HasSubstr;

TEST(Trigger, IterationsFireOnMultiplesOfThePeriod) {
  const Trigger t = Trigger::iterations(3);
  EXPECT_EQ(t.unit, LengthUnit::kIteration);
  EXPECT_FALSE(t.fires(1, 0, false));
  EXPECT_FALSE(t.fires(2, 0, false));
  EXPECT_TRUE(t.fires(3, 0, false));
  EXPECT_TRUE(t.fires(6, 1, true));
  EXPECT_FALSE(t.fires(7, 1, true));  // a new epoch does not matter to an iteration trigger
}

TEST(Trigger, EpochsFireOnTheIterationThatCompletesTheEpoch) {
  const Trigger t = Trigger::epochs(2);
  EXPECT_EQ(t.unit, LengthUnit::kEpoch);
  EXPECT_FALSE(t.fires(4, 1, true));   // epoch 1 completed: not a multiple of 2
  EXPECT_TRUE(t.fires(8, 2, true));    // epoch 2 completed
  EXPECT_FALSE(t.fires(9, 2, false));  // still epoch 2, but no epoch completed here
  EXPECT_TRUE(t.fires(16, 4, true));
}

TEST(Trigger, EndNeverFiresPeriodically) {
  const Trigger t = Trigger::end();
  EXPECT_TRUE(t.at_end);
  for (std::int64_t i = 1; i <= 4; ++i) EXPECT_FALSE(t.fires(i, i, true));
}

TEST(Trigger, PeriodsBelowOneAreRefused) {
  DPL_EXPECT_ERROR(Trigger::iterations(0), HasSubstr("Trigger::iterations: expected a period >= 1, got 0"));
  DPL_EXPECT_ERROR(Trigger::epochs(-1), HasSubstr("Trigger::epochs: expected a period >= 1, got -1"));
}

}  // namespace
