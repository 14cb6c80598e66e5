// The phase summary of one process: the measured iteration reported apart from the phases, the
// shares of it, and the note when the phases miss much of it (a GPU timed without waiting).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "dpl/profile/phase_timer.hpp"

namespace {
using namespace dpl::profile;

// Three iterations of data 1 ms, compute `compute` ms, allreduce 1 ms and optimize 1 ms, laid end
// to end inside an iteration of `iteration` ms (none when 0); the first is the warm-up.
PhaseTimer timed(double compute_ms, double iteration_ms) {
  PhaseTimer timer;
  for (int i = 0; i < 3; ++i) {
    const double t0 = 10.0 * i;
    double t = t0;
    for (const auto& [name, ms] : {std::pair<const char*, double>{"data", 1.0}, {"compute", compute_ms},
                                   {"allreduce", 1.0}, {"optimize", 1.0}}) {
      timer.record(name, t, ms * 1e-3, i);
      t += ms * 1e-3;
    }
    if (iteration_ms > 0) timer.record(kIterationSeries, t0, iteration_ms * 1e-3, i);
  }
  return timer;
}

TEST(PhaseSummary, TheMeasuredIterationIsReportedApartFromThePhases) {
  const Summary s = summarize(timed(6.0, 10.0), nullptr, 1);
  ASSERT_EQ(s.phases.size(), 4u);
  for (const auto& p : s.phases) EXPECT_NE(p.name, kIterationSeries);
  EXPECT_EQ(s.iteration.name, kIterationSeries);
  EXPECT_EQ(s.iteration.iterations, 2);
  EXPECT_NEAR(s.iteration.mean, 10.0e-3, 1e-9);

  const std::string table = format_table(s);
  EXPECT_NE(table.find("iteration (sum of phases)"), std::string::npos) << table;
  EXPECT_NE(table.find("iteration (measured)"), std::string::npos) << table;
  // Shares are of the measured 10 ms: compute's 6 ms is 60%; the phases cover 90%, no note.
  EXPECT_NE(table.find("60.0%"), std::string::npos) << table;
  EXPECT_EQ(table.find("note:"), std::string::npos) << table;

  const nlohmann::json j = nlohmann::json::parse(to_json(s));
  EXPECT_NEAR(j.at("iteration").at("mean_s").get<double>(), 10.0e-3, 1e-9);
  EXPECT_EQ(j.at("iteration").at("iterations").get<int>(), 2);
  EXPECT_EQ(j.at("phases").size(), 4u);
}

TEST(PhaseSummary, PhasesThatMissMuchOfTheIterationAreNamedSo) {
  // The GPU case: 6 ms of phases (kernels queued) in a 20 ms iteration (the device's time).
  const std::string table = format_table(summarize(timed(3.0, 20.0), nullptr, 1));
  EXPECT_NE(table.find("note: the phases cover 30% of the iteration"), std::string::npos) << table;
  EXPECT_NE(table.find("synchronized timing"), std::string::npos) << table;
}

TEST(PhaseSummary, WithoutAMeasuredIterationSharesAreOfThePhasesSum) {
  const Summary s = summarize(timed(7.0, 0.0), nullptr, 1);
  EXPECT_EQ(s.iteration.iterations, 0);
  const std::string table = format_table(s);
  EXPECT_EQ(table.find("iteration (measured)"), std::string::npos) << table;
  EXPECT_NE(table.find("70.0%"), std::string::npos) << table;  // compute: 7 of the phases' 10 ms
  EXPECT_FALSE(nlohmann::json::parse(to_json(s)).contains("iteration"));
}

}  // namespace
