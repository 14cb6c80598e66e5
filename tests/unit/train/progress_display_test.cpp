// The progress display (Chainer's ProgressBar): terminal block, plain lines, time to finish.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "dpl/train.hpp"
#include "support/lines.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;

using test::lines_of;

TEST(ProgressDisplay, TimedeltaLikePython) {
  EXPECT_EQ(format_timedelta(0.0), "0:00:00");
  EXPECT_EQ(format_timedelta(83.456789), "0:01:23.456789");
  EXPECT_EQ(format_timedelta(3600.5), "1:00:00.500000");
  EXPECT_EQ(format_timedelta(90061.0), "1 day, 1:01:01");
  EXPECT_EQ(format_timedelta(2 * 86400.0 + 59.0), "2 days, 0:00:59");
  EXPECT_THROW(format_timedelta(-1.0), dpl::Error);
}

TEST(ProgressDisplay, TerminalBlockLines) {
  std::ostringstream out;
  ProgressDisplay bar(20, LengthUnit::kEpoch, out, {100, 50, 10.0, OutputMode::kTerminal});
  const auto lines = bar.block_lines(1234, 2.5, 123.45, 83.456789);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "     total [######............................................] 12.50%");
  EXPECT_EQ(lines[1], "this epoch [#########################.........................] 50.00%");
  EXPECT_EQ(lines[2], "      1234 iter, 2 epoch / 20 epochs");
  EXPECT_EQ(lines[3], "    123.45 iters/sec. Estimated time to finish: 0:01:23.456789.");
  ProgressDisplay iters(1000, LengthUnit::kIteration, out, {100, 10, 10.0, OutputMode::kPlain});
  const auto l2 = iters.block_lines(1000, 3.0, 1.0, 0.0);
  EXPECT_EQ(l2[0], "     total [##########] 100.00%");
  EXPECT_EQ(l2[2], "      1000 iter, 3 epoch / 1000 iterations");
  EXPECT_EQ(l2[3], "         1 iters/sec. Estimated time to finish: 0:00:00.");
}

TEST(ProgressDisplay, TerminalRedrawsInPlace) {
  std::ostringstream out;
  {
    ProgressDisplay bar(2, LengthUnit::kEpoch, out, {4, 8, 10.0, OutputMode::kTerminal});
    for (int it = 1; it <= 8; ++it) bar.update(it, it / 8.0, it * 0.5);
  }
  const std::string s = out.str();
  // Two drawings (iterations 4 and 8), each: erase below, four lines, cursor up four; then the
  // destructor erases the block.
  const std::string draw4 = "\033[J     total [##......] 25.00%\nthis epoch [####....] 50.00%\n"
                            "         4 iter, 0 epoch / 2 epochs\n"
                            "         2 iters/sec. Estimated time to finish: 0:00:06.\n\033[4A";
  EXPECT_EQ(s.substr(0, draw4.size()), draw4);
  EXPECT_NE(s.find("         8 iter, 1 epoch / 2 epochs\n"), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 7), "\033[4A\033[J");
}

TEST(ProgressDisplay, PlainLinesAtTheUpdateInterval) {
  std::ostringstream out;
  ProgressDisplay bar(2, LengthUnit::kEpoch, out, {16, 50, 0.0, OutputMode::kPlain});
  // 128 iterations per epoch at 128 iterations per second: every number below is exact.
  for (int it = 1; it <= 256; ++it) bar.update(it, it / 128.0, it / 128.0);
  bar.close();
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 16u);
  EXPECT_EQ(lines[0],
            "16 iter, 0 epoch / 2 epochs, total 6.25%, this epoch 12.50%, 128 iters/sec, "
            "estimated time to finish: 0:00:01.875000");
  EXPECT_EQ(lines[15],
            "256 iter, 2 epoch / 2 epochs, total 100.00%, this epoch 0.00%, 128 iters/sec, "
            "estimated time to finish: 0:00:00");
  EXPECT_EQ(out.str().find('\033'), std::string::npos);
}

TEST(ProgressDisplay, PlainLinesAreRateLimitedBySeconds) {
  std::ostringstream out;
  ProgressDisplay bar(1000, LengthUnit::kIteration, out, {10, 50, 5.0, OutputMode::kPlain});
  // One iteration per 0.1 s: a draw point every second, a line every 5 seconds.
  for (int it = 1; it <= 1000; ++it) bar.update(it, it / 100.0, it * 0.1);
  const auto lines = lines_of(out.str());
  EXPECT_EQ(lines.size(), 19u);  // t = 5.1 (first draw 5 s after the first call), 10.1, ..., 95.1
  EXPECT_EQ(lines[0].substr(0, 30), "60 iter, 0 epoch / 1000 iterat");
}

}  // namespace
