// Timelines of several ranks: the updater times the wait for each batch as the "data" phase, the
// Trainer agrees on a clock reference at the start, and each rank's Chrome trace carries what a
// merger needs to put every rank on one time axis.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"
#include "support/temp_dir.hpp"

namespace dpl::test {
namespace {

constexpr std::int64_t kIterations = 5;

// The model outlives the optimizer set up on it (members are destroyed in reverse order).
struct TrainedRun {
  std::shared_ptr<comm::Communicator> comm;
  std::unique_ptr<nn::Linear> model;
  std::unique_ptr<parallel::MultiNodeOptimizer> opt;
  double data_seconds = 0.0;
};

// kIterations steps of a small model under a Trainer, as a program would run them; with an
// output folder, the PhaseSummary extension too.
TrainedRun train_a_little(const std::string& out = "") {
  TrainedRun run;
  run.comm = comm::create_communicator("hierarchical");
  Generator gen(11);
  run.model = std::make_unique<nn::Linear>(4, 3, true, gen);
  nn::Linear& model = *run.model;
  run.opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.1f), run.comm);
  run.opt->setup(model);
  Tensor x = Tensor::uniform({32, 4}, 0.f, 1.f, gen);
  Tensor y = Tensor::zeros({32}, kInt32);
  data::BatchIterator batches(data::Dataset(x, y), 8, false);
  train::StandardUpdater updater(batches, *run.opt, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, kIterations, train::LengthUnit::kIteration, run.comm, out);
  std::ostringstream table;
  if (!out.empty()) trainer.extend(std::make_shared<train::extensions::PhaseSummary>(1, table));
  trainer.run();
  run.data_seconds = updater.data_seconds();
  return run;
}

TEST(Trace, TheUpdaterTimesEachBatchAsTheDataPhaseBeforeCompute) {
  const TrainedRun run = train_a_little();
  const profile::PhaseTimer& timer = run.opt->timer();
  ASSERT_FALSE(timer.series().empty());
  EXPECT_EQ(timer.series().front().name, "data");  // recorded first, so listed first
  const profile::PhaseSeries* data = timer.find("data");
  const profile::PhaseSeries* compute = timer.find("compute");
  ASSERT_NE(data, nullptr);
  ASSERT_NE(compute, nullptr);
  ASSERT_EQ(data->samples.size(), static_cast<std::size_t>(kIterations));
  ASSERT_EQ(compute->samples.size(), static_cast<std::size_t>(kIterations));
  double total = 0.0;
  for (std::size_t i = 0; i < data->samples.size(); ++i) {
    const profile::PhaseSample& d = data->samples[i];
    EXPECT_EQ(d.iteration, static_cast<std::int64_t>(i));
    EXPECT_EQ(d.iteration, compute->samples[i].iteration);
    EXPECT_GE(d.seconds, 0.0);
    // The batch is fetched before the update starts computing with it.
    EXPECT_LE(d.start + d.seconds, compute->samples[i].start + 1e-9) << "iteration " << i;
    total += d.seconds;
  }
  EXPECT_NEAR(run.data_seconds, total, 1e-9);
  // The whole iteration is recorded beside the phases, and each of its phases lies inside it.
  const profile::PhaseSeries* iteration = timer.find(profile::kIterationSeries);
  const profile::PhaseSeries* optimize = timer.find("optimize");
  ASSERT_NE(iteration, nullptr);
  ASSERT_NE(optimize, nullptr);
  ASSERT_EQ(iteration->samples.size(), static_cast<std::size_t>(kIterations));
  for (std::size_t i = 0; i < iteration->samples.size(); ++i) {
    const profile::PhaseSample& it = iteration->samples[i];
    EXPECT_EQ(it.iteration, static_cast<std::int64_t>(i));
    EXPECT_EQ(it.start, data->samples[i].start) << "iteration " << i;
    EXPECT_GE(it.start + it.seconds + 1e-9, optimize->samples[i].start + optimize->samples[i].seconds)
        << "iteration " << i;
  }
  // The summary carries the new phase like the others, on every rank alike.
  const profile::Summary s = run.opt->summary(1);
  ASSERT_FALSE(s.phases.empty());
  EXPECT_EQ(s.phases.front().name, "data");
  EXPECT_EQ(s.phases.front().iterations, kIterations - 1);
  EXPECT_EQ(s.iteration.iterations, kIterations - 1);
  for (const auto& p : s.phases) EXPECT_NE(p.name, profile::kIterationSeries);
}

TEST(Trace, EveryRankRecordsTheSameAgreedMomentAndWritesIt) {
  const TrainedRun run = train_a_little();
  const profile::ClockReference& ref = run.opt->timer().clock_reference();
  const int p = run.comm->size();
  EXPECT_EQ(ref.method, p > 1 ? "barrier" : "single process");
  EXPECT_GT(ref.wall, 1.6e9);  // seconds since 1970: after 2020
  // On one host the system clock is shared, so the ranks' wall times at the agreed moment must
  // be close (a barrier's exit skew, far below a second even on an oversubscribed machine).
  const auto micros = static_cast<std::int64_t>(std::llround(ref.wall * 1e6));
  Tensor mine = Tensor::from_vector<std::int64_t>({micros}, {1});
  Tensor all = Tensor::empty({p}, kInt64);
  run.comm->allgather(mine, all);
  for (std::int64_t w : all.to_vector<std::int64_t>()) EXPECT_LT(std::llabs(w - micros), 500000);

  TempDir dir("dpl_trace");
  const std::string path = dir.file("trace_rank" + std::to_string(run.comm->rank()) + ".json");
  run.opt->timer().write_chrome_trace(path, run.comm->rank());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  const nlohmann::json& other = j.at("otherData");
  EXPECT_EQ(other.at("rank").get<int>(), run.comm->rank());
  EXPECT_DOUBLE_EQ(other.at("sync_steady_s").get<double>(), ref.steady);
  EXPECT_DOUBLE_EQ(other.at("sync_wall_s").get<double>(), ref.wall);
  EXPECT_EQ(other.at("sync_method").get<std::string>(), ref.method);
  // The pair read while writing comes after the agreed moment on both clocks.
  EXPECT_GE(other.at("steady_s").get<double>(), ref.steady);
  EXPECT_GE(other.at("wall_s").get<double>(), ref.wall - 1e-3);
  std::int64_t data_events = 0;
  for (const auto& e : j.at("traceEvents")) {
    EXPECT_EQ(e.at("pid").get<int>(), run.comm->rank());
    if (e.at("name") == "data") {
      ++data_events;
      // Every phase started after the agreed moment, which came before the first step.
      EXPECT_GE(e.at("ts").get<double>(), ref.steady * 1e6 - 1.0);
    }
  }
  EXPECT_EQ(data_events, kIterations);
}

TEST(Trace, ThePhaseSummaryFileCarriesTheRunsShape) {
  TempDir dir("dpl_phase_summary");
  const TrainedRun run = train_a_little(dir.path().string());
  if (run.comm->rank() != 0) return;  // rank 0 writes the file
  std::ifstream in(dir.file("phase_summary.json"));
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j.at("ranks").get<int>(), run.comm->size());
  EXPECT_EQ(j.at("communicator").get<std::string>(), "hierarchical");
  EXPECT_EQ(j.at("nodes").get<int>(), run.comm->inter_size());
  EXPECT_EQ(j.at("timing").get<std::string>(), "non-intrusive");
  EXPECT_EQ(j.at("training_iterations").get<std::int64_t>(), kIterations);
  EXPECT_GT(j.at("training_seconds").get<double>(), 0.0);
  EXPECT_GE(j.at("data_seconds").get<double>(), 0.0);
  EXPECT_LE(j.at("data_seconds").get<double>(), j.at("training_seconds").get<double>());
  EXPECT_GE(j.at("threads_per_process").get<int>(), 1);
  EXPECT_EQ(j.at("phases").at(0).at("name").get<std::string>(), "data");
  // The measured iteration holds its phases: the mean over ranks of each rank's iteration is at
  // least that of the sum of its top-level phases (to the nanoseconds the summary rounds to).
  double phases = 0.0;
  for (const auto& p : j.at("phases"))
    if (p.at("name").get<std::string>().find('/') == std::string::npos) phases += p.at("mean_s").get<double>();
  EXPECT_GE(j.at("iteration").at("mean_s").get<double>() + 1e-8, phases);
  EXPECT_EQ(j.at("iteration").at("iterations").get<std::int64_t>(), kIterations - 1);
}

}  // namespace
}  // namespace dpl::test
