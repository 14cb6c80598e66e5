// The pieces of a resumable run that live outside the model and optimizer: generator states and
// the batch iterator's position and order (the log's history is in unit/train/training_log_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

TEST(GeneratorState, RestoredGeneratorContinuesTheSequence) {
  Generator a(42);
  for (int i = 0; i < 1000; ++i) a.next_u64();
  a.normal(0.f, 1.f);  // leaves the second Box-Muller value pending, which is state too
  const std::vector<std::uint64_t> saved = a.state();
  EXPECT_EQ(saved.size(), Generator::state_words());

  Generator b(7);
  b.set_state(saved);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.normal(0.f, 1.f), b.normal(0.f, 1.f));
  for (int i = 0; i < 700; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(GeneratorState, BadStatesAreRefusedAndLeaveTheGeneratorAlone) {
  Generator g(3);
  const std::vector<std::uint64_t> good = g.state();
  DPL_EXPECT_ERROR(g.set_state({1, 2, 3}), HasSubstr("expected " + std::to_string(good.size()) + " words, got 3"));
  std::vector<std::uint64_t> bad_flag = good;
  bad_flag[bad_flag.size() - 2] = 5;
  DPL_EXPECT_ERROR(g.set_state(bad_flag), HasSubstr("to be 0 or 1, got 5"));
  Generator fresh(3);
  EXPECT_EQ(g.next_u64(), fresh.next_u64());
}

data::Dataset numbered(std::int64_t n) {
  Tensor x = Tensor::empty({n, 1});
  Tensor y = Tensor::empty({n}, kInt32);
  for (std::int64_t i = 0; i < n; ++i) {
    x.set<float>({i, 0}, static_cast<float>(i));
    y.set<std::int32_t>({i}, static_cast<std::int32_t>(i));
  }
  return data::Dataset(x, y);
}

TEST(BatchIteratorState, ResumedIteratorServesTheSameBatches) {
  const data::Dataset ds = numbered(10);
  data::BatchIterator a(ds, 4, true, 9);
  for (int i = 0; i < 3; ++i) a.next();  // mid-epoch, after a batch that wrapped into epoch 2
  const data::BatchIteratorState s = a.state();
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.iteration, 3);
  EXPECT_EQ(s.position, 2);

  data::BatchIterator b(ds, 4, true, 1234);
  b.load_state(s);
  EXPECT_EQ(b.epoch_detail(), a.epoch_detail());
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(a.next().y.to_vector<std::int32_t>(), b.next().y.to_vector<std::int32_t>()) << "batch " << i;
    EXPECT_EQ(a.is_new_epoch(), b.is_new_epoch());
    EXPECT_EQ(a.epoch(), b.epoch());
  }
}

TEST(BatchIteratorState, StatesOfAnotherIteratorOrBrokenOrdersAreRefused) {
  const data::Dataset ds = numbered(10);
  data::BatchIterator it(ds, 4, true, 9);
  const data::BatchIteratorState good = it.state();
  data::BatchIterator other_batch(ds, 5);
  DPL_EXPECT_ERROR(other_batch.load_state(good), HasSubstr("the state is of batches of 4, this iterator's are of 5"));
  data::BatchIterator other_data(numbered(11), 4);
  DPL_EXPECT_ERROR(other_data.load_state(good), HasSubstr("a data set of 10 samples, this iterator's has 11"));

  data::BatchIteratorState twice = good;
  twice.order[1] = twice.order[0];
  DPL_EXPECT_ERROR(it.load_state(twice), HasSubstr("a permutation of 0..9, got " + std::to_string(twice.order[0]) +
                                                   " at position 1 a second time"));
  data::BatchIteratorState past = good;
  past.position = 10;
  DPL_EXPECT_ERROR(it.load_state(past), HasSubstr("expected a position in [0, 10), got 10"));
  data::BatchIteratorState short_gen = good;
  short_gen.generator.pop_back();
  DPL_EXPECT_ERROR(it.load_state(short_gen), HasSubstr("Generator::set_state"));
  EXPECT_EQ(it.state().order, good.order);  // unchanged by the refusals
}

}  // namespace
