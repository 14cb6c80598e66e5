// The pieces of a resumable run that live outside the model and optimizer: generator states,
// the batch iterator's position and order, the log's history, and report columns that hold
// every value.
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

TEST(LogReportState, RestoredReportContinuesTheLog) {
  train::LogReport a("");
  a.observe("main/loss", 1.0);
  a.end_epoch(1, 10);
  a.observe("main/loss", 3.0);
  a.observe("main/loss", 5.0);

  train::LogReport b("");
  b.restore(a.log(), a.pending(), 12.5);
  EXPECT_GE(b.elapsed_time(), 12.5);
  b.observe("main/loss", 7.0);
  const train::LogEntry& e = b.end_epoch(2, 20);
  EXPECT_EQ(*e.get("main/loss"), 5.0);
  ASSERT_EQ(b.log().size(), 2u);
  EXPECT_EQ(b.to_json().substr(0, 40), a.to_json().substr(0, 40));
  DPL_EXPECT_ERROR(b.restore({}, {{"main/loss", 1.0, 0}}, 0.0), HasSubstr("a count >= 1 for 'main/loss', got 0"));
}

TEST(PrintReportFormat, EveryValueFitsItsColumn) {
  EXPECT_EQ(train::format_value(1.17887e-06, 10), "1.1789e-06");
  EXPECT_EQ(train::format_value(0.191541, 10), "0.191541");
  EXPECT_EQ(train::format_value(-1.23456789e-100, 10), "-1.23e-100");
  EXPECT_EQ(train::format_value(12345678901.0, 12), "1.23457e+10");
  for (double v : {1.17885e-06, -9.87654e-300, 123456789012.0, -0.000123456, 1e300, 2.5}) {
    EXPECT_LE(train::format_value(v, 10).size(), 10u) << v;
    EXPECT_LE(train::format_value(v, 7).size(), 7u) << v;
  }

  train::PrintReport report(std::cout, {"epoch", "lr", "main/loss"}, train::OutputMode::kPlain);
  train::LogEntry e;
  e.epoch = 3;
  e.values = {{"lr", 1.17887e-06}, {"main/loss", 0.5}};
  const std::string row = report.row(e);
  EXPECT_EQ(row, "3           1.1789e-06  0.5         ");
  EXPECT_EQ(row.find("0.5"), report.header().find("main/loss"));
}

}  // namespace
