// GlobalBatchIterator: the ranks' batches make up the global batches of one order, and a state
// saved on p processes continues on q processes with the same global batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using ::testing::HasSubstr;

constexpr std::int64_t kSamples = 50;
constexpr std::int64_t kGlobal = 12;  // divides among 1, 2, 3, 4 and 6 processes; 50 is not a multiple

// Sample i holds the value i, so a batch says which samples it took.
Dataset numbered(std::int64_t n = kSamples) {
  std::vector<float> x(static_cast<std::size_t>(n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = static_cast<float>(i);
    y[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 7);
  }
  return Dataset(Tensor::from_vector(x, {n, 1}), Tensor::from_vector(y, {n}));
}

std::vector<GlobalBatchIterator> ranks(int p, std::uint64_t seed = 3, const Dataset& ds = numbered()) {
  std::vector<GlobalBatchIterator> out;
  for (int r = 0; r < p; ++r) out.emplace_back(ds, kGlobal, r, p, true, seed);
  return out;
}

// One global step: the samples of every rank's batch, in rank order.
std::vector<float> step(std::vector<GlobalBatchIterator>& its) {
  std::vector<float> samples;
  for (GlobalBatchIterator& it : its) {
    const Batch b = it.next();
    EXPECT_EQ(b.size(), kGlobal / static_cast<std::int64_t>(its.size()));
    for (float v : b.x.to_vector<float>()) samples.push_back(v);
  }
  return samples;
}

TEST(GlobalBatchIterator, RanksTakeTheirSharesOfOneGlobalOrder) {
  auto one = ranks(1), four = ranks(4);
  EXPECT_EQ(four[2].batch_size(), 3);
  EXPECT_EQ(four[2].batches_per_epoch(), 5);  // ceil(50 / 12)
  std::vector<float> epoch0;
  for (int k = 0; k < 12; ++k) {
    const std::vector<float> expected = step(one);
    EXPECT_EQ(step(four), expected) << "step " << k;
    if (epoch0.size() < kSamples) epoch0.insert(epoch0.end(), expected.begin(), expected.end());
    // The step that crosses the end of the 50 samples closes the epoch (at 60 and 108: steps 4 and 8).
    EXPECT_EQ(four[0].is_new_epoch(), k == 4 || k == 8) << "step " << k;
    EXPECT_EQ(four[3].epoch(), one[0].epoch());
  }
  // An epoch visits every sample once, in the order global_epoch_order names.
  epoch0.resize(kSamples);
  const std::vector<std::int64_t> order = global_epoch_order(kSamples, true, 3, 0);
  for (std::int64_t i = 0; i < kSamples; ++i)
    EXPECT_EQ(epoch0[static_cast<std::size_t>(i)], static_cast<float>(order[static_cast<std::size_t>(i)]));
  EXPECT_NE(global_epoch_order(kSamples, true, 3, 1), order) << "each epoch draws a new order";
  EXPECT_EQ(global_epoch_order(kSamples, true, 4, 0) == order, false) << "another seed, another order";
}

// The p -> q mapping: a state saved after 7 steps on 4 processes (in the second epoch, mid-way)
// loads on 2, 3 and 6 processes, and on 1, and every continuation serves exactly the global
// batches the uninterrupted run serves.
TEST(GlobalBatchIterator, AStateOfFourProcessesContinuesOnAnyCountWithTheSameGlobalBatches) {
  auto straight = ranks(1), four = ranks(4);
  for (int k = 0; k < 7; ++k) step(four), step(straight);
  const GlobalDataState saved = four[1].global_state();
  for (const GlobalBatchIterator& it : four) EXPECT_EQ(it.global_state().position, saved.position);
  EXPECT_EQ(saved.iteration, 7);
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, 7 * kGlobal - kSamples);
  EXPECT_EQ(saved.global_batch, kGlobal);

  std::vector<std::vector<float>> expected;
  for (int k = 0; k < 9; ++k) expected.push_back(step(straight));
  for (int q : {1, 2, 3, 6}) {
    auto resumed = ranks(q);
    for (GlobalBatchIterator& it : resumed) it.load_global_state(saved);
    EXPECT_EQ(resumed[0].iteration(), 7);
    EXPECT_EQ(resumed[0].epoch(), 1);
    for (int k = 0; k < 9; ++k)
      EXPECT_EQ(step(resumed), expected[static_cast<std::size_t>(k)]) << q << " processes, step " << k;
  }
}

TEST(GlobalBatchIterator, RefusesWhatCannotContinueTheSavedOrder) {
  auto four = ranks(4);
  step(four);
  const GlobalDataState saved = four[0].global_state();

  // A global batch that the processes do not divide, naming the counts that do.
  std::string msg = test::error_message([] { GlobalBatchIterator it(numbered(), kGlobal, 0, 5); });
  EXPECT_THAT(msg, HasSubstr("a global batch of 12 samples does not divide among 5 processes"));
  EXPECT_THAT(msg, HasSubstr("one of 1, 2, 3, 4, 6, 12"));

  // Another seed, other data, another global batch: each named with both values.
  GlobalBatchIterator other_seed(numbered(), kGlobal, 0, 2, true, 4);
  DPL_EXPECT_ERROR(other_seed.load_global_state(saved), HasSubstr("setting 'seed' was 3 when saved, is 4 now"));
  GlobalBatchIterator other_data(numbered(kSamples + 1), kGlobal, 0, 2, true, 3);
  msg = test::error_message([&] { other_data.load_global_state(saved); });
  EXPECT_THAT(msg, HasSubstr("the number of samples was 50 when saved, is 51 now"));
  EXPECT_THAT(msg, HasSubstr("setting 'data set content' was"));
  GlobalBatchIterator other_batch(numbered(), 2 * kGlobal, 0, 2, true, 3);
  DPL_EXPECT_ERROR(other_batch.load_global_state(saved), HasSubstr("the global batch was 12 when saved, is 24 now"));
  // Settings the program names are compared too.
  GlobalBatchIterator named(numbered(), kGlobal, 0, 2, true, 3);
  named.set_order_settings({{"version", "2"}});
  DPL_EXPECT_ERROR(named.load_global_state(saved),
                   HasSubstr("setting 'version' was (not recorded) when saved, is 2 now"));
  // Counters that no run reaches.
  GlobalDataState bent = saved;
  bent.position += 1;
  GlobalBatchIterator fresh(numbered(), kGlobal, 1, 2, true, 3);
  DPL_EXPECT_ERROR(fresh.load_global_state(bent), HasSubstr("the counters disagree"));
  // Nothing moved: the refused iterators serve the first global batch still.
  auto two = ranks(2);
  EXPECT_EQ(fresh.next().x.to_vector<float>(), (two[0].next(), two[1].next()).x.to_vector<float>());
}

}  // namespace
