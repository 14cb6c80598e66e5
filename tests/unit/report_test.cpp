// Chainer-style reports (table, JSON log, progress bar) and the evaluator, single process.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "dpl/data.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;
namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

LogEntry sample_entry() {
  LogEntry e;
  e.epoch = 1;
  e.iteration = 600;
  e.elapsed_time = 16.7034;
  e.values = {{"main/loss", 0.191541}, {"main/accuracy", 0.9425},
              {"validation/main/loss", 0.0912}, {"validation/main/accuracy", 0.9712}};
  return e;
}

// --- PrintReport -------------------------------------------------------------------------------

TEST(ReportTable, HeaderMatchesChainer) {
  std::ostringstream out;
  PrintReport report(out);
  EXPECT_EQ(report.header(),
            "epoch       main/loss   validation/main/loss  main/accuracy  validation/main/accuracy  elapsed_time");
}

TEST(ReportTable, RowsAreLeftAlignedGFormatInFixedColumns) {
  std::ostringstream out;
  PrintReport report(out, PrintReport::default_entries(), OutputMode::kPlain);
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
  PrintReport report(out, PrintReport::default_entries(), OutputMode::kPlain);
  LogReport log("");
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
  PrintReport report(out, {"epoch", "iteration"}, OutputMode::kTerminal);
  report.print(sample_entry());
  EXPECT_EQ(out.str(), "\033[2Kepoch       iteration \n\033[2K1           600         \n");
}

TEST(ReportTable, StringStreamsAreNotTerminals) {
  std::ostringstream out;
  EXPECT_FALSE(is_terminal(out));
  EXPECT_EQ(resolve_mode(OutputMode::kAuto, out), OutputMode::kPlain);
  EXPECT_EQ(resolve_mode(OutputMode::kTerminal, out), OutputMode::kTerminal);
}

// --- LogReport ---------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("dpl_report_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ReportLog, WritesChainersJsonArrayOfEpochMeans) {
  TempDir dir;
  const fs::path out = dir.path() / "nested" / "result";  // created on first write
  LogReport log(out.string());
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

TEST(ReportLog, InMemoryWithoutFolderAndMeasuresElapsedTime) {
  LogReport log("");
  EXPECT_EQ(log.path(), "");
  log.observe("x", 1.0);
  const LogEntry& e = log.end_epoch(1, 10);
  EXPECT_GE(e.elapsed_time, 0.0);
  EXPECT_LT(e.elapsed_time, 60.0);
  EXPECT_EQ(log.to_json().substr(0, 20), "[\n    {\n        \"x\":");
}

TEST(ReportLog, UnwritableFolderIsAnError) {
  TempDir dir;
  fs::create_directories(dir.path());
  std::ofstream(dir.path() / "file") << "x";
  LogReport log((dir.path() / "file" / "sub").string());
  try {
    log.end_epoch(1, 1, {}, 0.0);
    FAIL() << "expected dpl::Error";
  } catch (const dpl::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "file" / "sub").string()), std::string::npos) << e.what();
  }
}

// --- ProgressBar -------------------------------------------------------------------------------

TEST(ReportProgress, TimedeltaLikePython) {
  EXPECT_EQ(format_timedelta(0.0), "0:00:00");
  EXPECT_EQ(format_timedelta(83.456789), "0:01:23.456789");
  EXPECT_EQ(format_timedelta(3600.5), "1:00:00.500000");
  EXPECT_EQ(format_timedelta(90061.0), "1 day, 1:01:01");
  EXPECT_EQ(format_timedelta(2 * 86400.0 + 59.0), "2 days, 0:00:59");
  EXPECT_THROW(format_timedelta(-1.0), dpl::Error);
}

TEST(ReportProgress, TerminalBlockLines) {
  std::ostringstream out;
  ProgressBar bar(20, LengthUnit::kEpoch, out, {100, 50, 10.0, OutputMode::kTerminal});
  const auto lines = bar.block_lines(1234, 2.5, 123.45, 83.456789);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "     total [######............................................] 12.50%");
  EXPECT_EQ(lines[1], "this epoch [#########################.........................] 50.00%");
  EXPECT_EQ(lines[2], "      1234 iter, 2 epoch / 20 epochs");
  EXPECT_EQ(lines[3], "    123.45 iters/sec. Estimated time to finish: 0:01:23.456789.");
  ProgressBar iters(1000, LengthUnit::kIteration, out, {100, 10, 10.0, OutputMode::kPlain});
  const auto l2 = iters.block_lines(1000, 3.0, 1.0, 0.0);
  EXPECT_EQ(l2[0], "     total [##########] 100.00%");
  EXPECT_EQ(l2[2], "      1000 iter, 3 epoch / 1000 iterations");
  EXPECT_EQ(l2[3], "         1 iters/sec. Estimated time to finish: 0:00:00.");
}

TEST(ReportProgress, TerminalRedrawsInPlace) {
  std::ostringstream out;
  {
    ProgressBar bar(2, LengthUnit::kEpoch, out, {4, 8, 10.0, OutputMode::kTerminal});
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

TEST(ReportProgress, PlainLinesAtTheUpdateInterval) {
  std::ostringstream out;
  ProgressBar bar(2, LengthUnit::kEpoch, out, {16, 50, 0.0, OutputMode::kPlain});
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

TEST(ReportProgress, PlainLinesAreRateLimitedBySeconds) {
  std::ostringstream out;
  ProgressBar bar(1000, LengthUnit::kIteration, out, {10, 50, 5.0, OutputMode::kPlain});
  // One iteration per 0.1 s: a draw point every second, a line every 5 seconds.
  for (int it = 1; it <= 1000; ++it) bar.update(it, it / 100.0, it * 0.1);
  const auto lines = lines_of(out.str());
  EXPECT_EQ(lines.size(), 19u);  // t = 5.1 (first draw 5 s after the first call), 10.1, ..., 95.1
  EXPECT_EQ(lines[0].substr(0, 30), "60 iter, 0 epoch / 1000 iterat");
}

// --- evaluate ----------------------------------------------------------------------------------

// Wraps a Linear layer and records the autograd and train modes its forward saw.
class Probe : public nn::Module {
 public:
  explicit Probe(Generator& gen) : inner_(register_module("inner", std::make_shared<nn::Linear>(5, 3, true, gen))) {}
  Variable forward(const Variable& x) override {
    saw_grad = saw_grad || grad_enabled();
    saw_training = saw_training || is_training();
    ++calls;
    return inner_->forward(x);
  }
  bool saw_grad = false;
  bool saw_training = false;
  int calls = 0;

 private:
  std::shared_ptr<nn::Linear> inner_;
};

data::Dataset random_dataset(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::normal({n, 5}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({n}, kInt32);
  for (std::int64_t i = 0; i < n; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(3)));
  return data::Dataset(x, y);
}

TEST(ReportEvaluate, WeightsBatchesBySampleCount) {
  Generator gen(3);
  Probe model(gen);
  const data::Dataset ds = random_dataset(23, 8);
  // The whole set in one batch is the reference.
  const Variable logits = model(Variable(ds.images()));
  const double loss = softmax_cross_entropy(logits, ds.labels()).item();
  const double acc = accuracy(logits, ds.labels()).item();
  model.saw_grad = false;
  model.saw_training = false;
  model.calls = 0;

  const EvalResult r = evaluate(model, ds, 5);  // 5+5+5+5+3
  EXPECT_EQ(model.calls, 5);
  EXPECT_EQ(r.samples, 23);
  EXPECT_NEAR(r.loss, loss, 1e-6 * std::abs(loss));
  EXPECT_EQ(std::lround(acc * 23), std::lround(r.accuracy * 23));
  EXPECT_EQ(std::round(r.accuracy * 23), r.accuracy * 23);  // a whole number of samples
  EXPECT_FALSE(model.saw_grad);
  EXPECT_FALSE(model.saw_training);
  EXPECT_TRUE(model.is_training());  // restored

  // Two uneven shards, weighted by their sizes, give the same means.
  const EvalResult a = evaluate(model, ds.slice(0, 4), 3);
  const EvalResult b = evaluate(model, ds.slice(4, 19), 3);
  EXPECT_NEAR((a.loss * 4 + b.loss * 19) / 23, r.loss, 1e-6 * std::abs(loss));
  EXPECT_NEAR((a.accuracy * 4 + b.accuracy * 19) / 23, r.accuracy, 1e-12);
}

TEST(ReportEvaluate, KeepsEvalModeAndRejectsBadInput) {
  Generator gen(3);
  Probe model(gen);
  model.eval();
  evaluate(model, random_dataset(4, 1), 2);
  EXPECT_FALSE(model.is_training());
  EXPECT_THROW(evaluate(model, random_dataset(4, 1), 0), dpl::Error);
  EXPECT_THROW(evaluate(model, data::Dataset(), 2), dpl::Error);
  // A model that throws still gets its mode back.
  model.train();
  const data::Dataset wrong(Tensor::zeros({2, 4}), Tensor::zeros({2}, kInt32));
  EXPECT_THROW(evaluate(model, wrong, 2), dpl::Error);
  EXPECT_TRUE(model.is_training());
}

TEST(ReportEvaluate, OverABatchSourceMatchesTheDataSet) {
  Generator gen(3);
  Probe model(gen);
  const data::Dataset ds = random_dataset(23, 8);
  const EvalResult reference = evaluate(model, ds, 5);
  data::BatchIterator source(ds, 5, /*shuffle=*/false, 0, /*repeat=*/false);
  model.calls = 0;
  const EvalResult r = evaluate(model, source, source.batches_per_epoch());
  EXPECT_EQ(model.calls, 5);
  EXPECT_EQ(r.samples, 23);
  EXPECT_EQ(r.loss, reference.loss);  // the same batches, the same sums
  EXPECT_EQ(r.accuracy, reference.accuracy);
  EXPECT_TRUE(model.is_training());
  // No batches and no other rank: nothing to evaluate.
  EXPECT_THROW(evaluate(model, source, 0), dpl::Error);
  EXPECT_THROW(evaluate(model, source, -1), dpl::Error);
}

TEST(ReportObservation, SumsSixteenBitValuesInFloat32AndRefusesIntegers) {
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

}  // namespace
