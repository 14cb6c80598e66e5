// The trainer's observations: sums on the device, means, and restoring them from a checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(Observation, SumsSixteenBitValuesInFloat32AndRefusesIntegers) {
  Observation o;
  o.observe("main/loss", Tensor::full({}, 0.5, TensorOptions(kBFloat16)));
  o.observe("main/loss", Tensor::full({1}, 0.25, TensorOptions(kFloat16)));
  o.observe("main/loss", Tensor::full({}, 0.75));
  const auto means = o.take_means();
  ASSERT_EQ(means.size(), 1u);
  EXPECT_EQ(means[0].first, "main/loss");
  EXPECT_EQ(means[0].second, 0.5);  // (0.5 + 0.25 + 0.75) / 3, each exact in 16 bits
  try {
    o.observe("main/accuracy", Tensor::zeros({}, TensorOptions(kInt32)));
    FAIL() << "an int32 observation was accepted";
  } catch (const dpl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 'main/accuracy' to be a one-element float32, bfloat16 or float16 "
                                         "tensor, got int32"), std::string::npos) << e.what();
  }
}

// The Trainer's pending observations come back from a checkpoint's values, input as well.
// What each rank of a job with another number of ranks restores: the saved ranks' sums
// averaged, so the mean over ranks of each rank's mean is kept.
TEST(Observation, AveragesTheSumsOfSeveralRanks) {
  std::vector<std::string> texts;
  for (double loss : {1.0, 2.0, 6.0}) {
    Observation o;
    o.observe("main/loss", Tensor::full({}, loss));
    o.observe("main/loss", Tensor::full({}, loss));
    o.observe("lr", loss / 10);
    texts.push_back(o.to_json());
  }
  Observation mean;
  mean.restore_json(Observation::average_json(texts), Device::cpu());
  const auto means = mean.take_means();
  ASSERT_EQ(means.size(), 2u);
  EXPECT_EQ(means[0].first, "main/loss");
  EXPECT_DOUBLE_EQ(means[0].second, 3.0);
  EXPECT_DOUBLE_EQ(means[1].second, 0.3);
  Observation other;
  other.observe("main/loss", 1.0);
  texts.push_back(other.to_json());
  DPL_EXPECT_ERROR(Observation::average_json(texts), HasSubstr("rank 3's sums differ in keys or counts"));
}

TEST(Observation, RestoredCountsMustBeWholeNumbers) {
  Observation observation;
  for (const char* count : {"1e300", "-1", "1.5", "\"2\""}) {
    SCOPED_TRACE(count);
    const std::string text = std::string(R"([["main/loss", null, 2.5, )") + count + "]]";
    DPL_EXPECT_ERROR(observation.restore_json(text, Device::cpu()), HasSubstr("Observation::restore_json: expected "));
  }
  observation.restore_json(R"([["main/loss", null, 2.5, 2]])", Device::cpu());
  const auto means = observation.take_means();
  ASSERT_EQ(means.size(), 1u);
  EXPECT_DOUBLE_EQ(means[0].second, 1.25);
}

TEST(Observation, RecordsTensorsAndRefusesNumbersWhileRecording) {
  Observation obs;
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
