// The training log: epoch means written as Chainer's JSON log, in memory, and restored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dpl/core/error.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TrainingLog, WritesChainersJsonArrayOfEpochMeans) {
  test::TempDir dir("dpl_training_log");
  const fs::path out = dir.path() / "nested" / "result";  // created on first write
  TrainingLog log(out.string());
  EXPECT_EQ(log.path(), (out / "log").string());
  for (double v : {1.0, 2.0, 3.0}) log.observe("main/loss", v);
  log.observe("main/accuracy", 0.25);
  log.observe("main/accuracy", 0.75);
  const LogEntry& e =
      log.end_epoch(1, 600, {{"validation/main/loss", 1.5}, {"validation/main/accuracy", 0.75}}, 16.5);
  EXPECT_EQ(e.get("main/loss"), 2.0);
  EXPECT_EQ(e.get("iteration"), 600.0);
  EXPECT_FALSE(e.get("no/such").has_value());
  const std::string expected1 =
      "[\n"
      "    {\n"
      "        \"main/loss\": 2.0,\n"
      "        \"main/accuracy\": 0.5,\n"
      "        \"validation/main/loss\": 1.5,\n"
      "        \"validation/main/accuracy\": 0.75,\n"
      "        \"epoch\": 1,\n"
      "        \"iteration\": 600,\n"
      "        \"elapsed_time\": 16.5\n"
      "    }\n"
      "]";
  EXPECT_EQ(read_text(out / "log"), expected1 + "\n");

  // Observations start afresh each epoch; the whole array is rewritten.
  log.observe("main/loss", 0.5);
  log.end_epoch(2, 1200, {{"main/loss", 0.25}}, 30.0);  // extra replaces the mean
  ASSERT_EQ(log.log().size(), 2u);
  EXPECT_EQ(log.log()[1].values.size(), 1u);
  const std::string text = read_text(out / "log");
  EXPECT_EQ(text.substr(0, expected1.size() - 2), expected1.substr(0, expected1.size() - 2));
  EXPECT_NE(text.find("        \"main/loss\": 0.25,\n        \"epoch\": 2,\n        \"iteration\": 1200,\n"
                      "        \"elapsed_time\": 30.0\n    }\n]\n"),
            std::string::npos)
      << text;
  EXPECT_FALSE(fs::exists(out / "log.tmp"));
}

TEST(TrainingLog, InMemoryWithoutFolderAndMeasuresElapsedTime) {
  TrainingLog log("");
  EXPECT_EQ(log.path(), "");
  log.observe("x", 1.0);
  const LogEntry& e = log.end_epoch(1, 10);
  EXPECT_GE(e.elapsed_time, 0.0);
  EXPECT_LT(e.elapsed_time, 60.0);
  EXPECT_EQ(log.to_json().substr(0, 20), "[\n    {\n        \"x\":");
}

TEST(TrainingLog, UnwritableFolderIsAnError) {
  test::TempDir dir("dpl_training_log");
  fs::create_directories(dir.path());
  std::ofstream(dir.path() / "file") << "x";
  TrainingLog log((dir.path() / "file" / "sub").string());
  try {
    log.end_epoch(1, 1, {}, 0.0);
    FAIL() << "expected dpl::Error";
  } catch (const dpl::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "file" / "sub").string()), std::string::npos) << e.what();
  }
}

TEST(TrainingLog, RestoredLogContinuesTheLog) {
  TrainingLog a("");
  a.observe("main/loss", 1.0);
  a.end_epoch(1, 10);
  a.observe("main/loss", 3.0);
  a.observe("main/loss", 5.0);

  TrainingLog b("");
  b.restore(a.log(), a.pending(), 12.5);
  EXPECT_GE(b.elapsed_time(), 12.5);
  b.observe("main/loss", 7.0);
  const LogEntry& e = b.end_epoch(2, 20);
  EXPECT_EQ(*e.get("main/loss"), 5.0);
  ASSERT_EQ(b.log().size(), 2u);
  EXPECT_EQ(b.to_json().substr(0, 40), a.to_json().substr(0, 40));
  DPL_EXPECT_ERROR(b.restore({}, {{"main/loss", 1.0, 0}}, 0.0), HasSubstr("a count >= 1 for 'main/loss', got 0"));
}

}  // namespace
