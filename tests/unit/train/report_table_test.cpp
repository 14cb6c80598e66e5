// The report table (Chainer's PrintReport format) and the terminal detection it draws with.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "dpl/train.hpp"
#include "support/lines.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;

using test::lines_of;

LogEntry sample_entry() {
  LogEntry e;
  e.epoch = 1;
  e.iteration = 600;
  e.elapsed_time = 16.7034;
  e.values = {{"main/loss", 0.191541}, {"main/accuracy", 0.9425},
              {"validation/main/loss", 0.0912}, {"validation/main/accuracy", 0.9712}};
  return e;
}

TEST(ReportTable, HeaderMatchesChainer) {
  std::ostringstream out;
  ReportTable report(out);
  EXPECT_EQ(report.header(),
            "epoch       main/loss   validation/main/loss  main/accuracy  validation/main/accuracy  elapsed_time");
}

TEST(ReportTable, RowsAreLeftAlignedGFormatInFixedColumns) {
  std::ostringstream out;
  ReportTable report(out, ReportTable::default_entries(), OutputMode::kPlain);
  // Widths 10, 10, 20, 13, 24, 12, each value followed by two spaces.
  EXPECT_EQ(report.row(sample_entry()),
            "1           0.191541    0.0912                0.9425         0.9712                    16.7034       ");
  LogEntry partial = sample_entry();
  partial.values.resize(2);  // no validation values: blank columns of the same width
  EXPECT_EQ(report.row(partial),
            "1           0.191541                          0.9425                                   16.7034       ");
  LogEntry big = sample_entry();
  big.epoch = 12;
  big.values = {{"main/loss", 1.5e-7}};
  big.elapsed_time = 1234567.0;
  EXPECT_EQ(report.row(big).substr(0, 24), "12          1.5e-07     ");
  EXPECT_NE(report.row(big).find("1.23457e+06 "), std::string::npos);
}

TEST(ReportTable, HeaderOnceThenOneRowPerEpoch) {
  std::ostringstream out;
  ReportTable report(out, ReportTable::default_entries(), OutputMode::kPlain);
  TrainingLog log("");
  log.observe("main/loss", 0.5);
  log.end_epoch(1, 100, {}, 1.0);
  report.update(log);
  log.observe("main/loss", 0.25);
  log.end_epoch(2, 200, {}, 2.0);
  log.observe("main/loss", 0.125);
  log.end_epoch(3, 300, {}, 3.0);
  report.update(log);
  report.update(log);  // nothing new
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], report.header());
  EXPECT_EQ(lines[1].substr(0, 22), "1           0.5       ");
  EXPECT_EQ(lines[3].substr(0, 22), "3           0.125     ");
  EXPECT_EQ(out.str().find('\033'), std::string::npos);  // no escapes off a terminal
}

TEST(ReportTable, TerminalModeClearsTheLineFirst) {
  std::ostringstream out;
  ReportTable report(out, {"epoch", "iteration"}, OutputMode::kTerminal);
  report.print(sample_entry());
  EXPECT_EQ(out.str(), "\033[2Kepoch       iteration \n\033[2K1           600         \n");
}

TEST(ReportTable, StringStreamsAreNotTerminals) {
  std::ostringstream out;
  EXPECT_FALSE(is_terminal(out));
  EXPECT_EQ(resolve_mode(OutputMode::kAuto, out), OutputMode::kPlain);
  EXPECT_EQ(resolve_mode(OutputMode::kTerminal, out), OutputMode::kTerminal);
}

TEST(ReportTable, EveryValueFitsItsColumn) {
  EXPECT_EQ(format_value(1.17887e-06, 10), "1.1789e-06");
  EXPECT_EQ(format_value(0.191541, 10), "0.191541");
  EXPECT_EQ(format_value(-1.23456789e-100, 10), "-1.23e-100");
  EXPECT_EQ(format_value(12345678901.0, 12), "1.23457e+10");
  for (double v : {1.17885e-06, -9.87654e-300, 123456789012.0, -0.000123456, 1e300, 2.5}) {
    EXPECT_LE(format_value(v, 10).size(), 10u) << v;
    EXPECT_LE(format_value(v, 7).size(), 7u) << v;
  }

  ReportTable report(std::cout, {"epoch", "lr", "main/loss"}, OutputMode::kPlain);
  LogEntry e;
  e.epoch = 3;
  e.values = {{"lr", 1.17887e-06}, {"main/loss", 0.5}};
  const std::string row = report.row(e);
  EXPECT_EQ(row, "3           1.1789e-06  0.5         ");
  EXPECT_EQ(row.find("0.5"), report.header().find("main/loss"));
}

}  // namespace
