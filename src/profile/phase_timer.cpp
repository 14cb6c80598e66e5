#include "dpl/profile/phase_timer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "core/atomic_file.hpp"
#include "dpl/comm/agreement.hpp"
#include "dpl/comm/communicator.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::profile {

ClockReference agree_on_clock(comm::Communicator* comm) {
  if (comm != nullptr && comm->size() > 1) {
    // The first barrier waits for the slowest rank; after it every rank is running, so the
    // second one ends for all within one round of messages rather than a rank's start-up time.
    comm->barrier();
    comm->barrier();
  }
  ClockReference r;
  r.steady = now_seconds();
  r.wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  r.method = comm != nullptr && comm->size() > 1 ? "barrier" : "single process";
  return r;
}

void PhaseTimer::record(const std::string& name, double start, double seconds, std::int64_t iteration) {
  auto it = std::find_if(series_.begin(), series_.end(), [&](const PhaseSeries& s) { return s.name == name; });
  if (it == series_.end()) {
    series_.push_back(PhaseSeries{name, {}});
    it = series_.end() - 1;
  }
  it->samples.push_back(PhaseSample{start, seconds, iteration});
}

const PhaseSeries* PhaseTimer::find(const std::string& name) const {
  for (const auto& s : series_)
    if (s.name == name) return &s;
  return nullptr;
}

void PhaseTimer::clear() { series_.clear(); }

void PhaseTimer::write_chrome_trace(const std::string& path, int rank) const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& s : series_) {
    // Sub-phases go on their own row so they nest visibly under their phase.
    const int tid = s.name.find('/') == std::string::npos ? 0 : 1;
    for (const auto& x : s.samples) {
      events.push_back({{"name", s.name}, {"ph", "X"}, {"pid", rank}, {"tid", tid},
                        {"ts", x.start * 1e6}, {"dur", x.seconds * 1e6}, {"args", {{"iteration", x.iteration}}}});
    }
  }
  // Both clocks read back to back: a merger without an agreed moment can still align ranks by
  // the system clock (as well as the hosts' clocks agree).
  nlohmann::json other{{"rank", rank},
                       {"steady_s", now_seconds()},
                       {"wall_s", std::chrono::duration<double>(
                                      std::chrono::system_clock::now().time_since_epoch()).count()}};
  if (!clock_.method.empty()) {
    other["sync_steady_s"] = clock_.steady;
    other["sync_wall_s"] = clock_.wall;
    other["sync_method"] = clock_.method;
  }
  detail::write_file_atomically(
      path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}}.dump(),
      "write_chrome_trace");
}

namespace {
double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per-rank mean of one series after the warm-up samples.
double series_mean(const PhaseSeries& s, std::int64_t skip, std::int64_t& used, std::int64_t& skipped) {
  const auto n = static_cast<std::int64_t>(s.samples.size());
  skipped = n > skip ? skip : 0;
  used = n - skipped;
  double total = 0.0;
  for (std::int64_t i = skipped; i < n; ++i) total += s.samples[static_cast<std::size_t>(i)].seconds;
  return used ? total / static_cast<double>(used) : 0.0;
}
}  // namespace

Summary summarize(const PhaseTimer& timer, comm::Communicator* comm, std::int64_t skip) {
  const auto& series = timer.series();
  const auto phases = static_cast<std::int64_t>(series.size());
  const int ranks = comm ? comm->size() : 1;

  Summary out;
  out.ranks = ranks;
  out.allreduce_bytes = timer.allreduce_bytes();

  // Nanoseconds as int64: exact to combine, and every communicator supports int64.
  std::vector<std::int64_t> mine(static_cast<std::size_t>(2 * phases));
  for (std::int64_t i = 0; i < phases; ++i) {
    std::int64_t used = 0, skipped = 0;
    const double mean = series_mean(series[static_cast<std::size_t>(i)], skip, used, skipped);
    mine[static_cast<std::size_t>(2 * i)] = static_cast<std::int64_t>(mean * 1e9 + 0.5);
    mine[static_cast<std::size_t>(2 * i + 1)] = used;
    if (i == 0) out.skipped_iterations = skipped;
  }

  std::vector<std::int64_t> all = mine;
  if (comm && ranks > 1) {
    // Every rank must hold the same phases in the same order before their numbers are combined.
    std::string names;
    for (const auto& s : series) names += s.name + '\n';
    comm::check_ranks_agree(*comm, names,
                            {"profile::summarize", "the recorded phases", "phase",
                             "every rank must time the same phases in the same order"});
    if (phases > 0) {
      Tensor send = Tensor::from_vector<std::int64_t>(mine, {2 * phases});
      Tensor recv = Tensor::empty({2 * phases * ranks}, kInt64);
      comm->allgather(send, recv);
      all = recv.to_vector<std::int64_t>();
    }
  }

  for (std::int64_t i = 0; i < phases; ++i) {
    std::vector<double> means;
    for (int r = 0; r < ranks; ++r) means.push_back(static_cast<double>(all[static_cast<std::size_t>(r * 2 * phases + 2 * i)]) * 1e-9);
    PhaseSummary p;
    p.name = series[static_cast<std::size_t>(i)].name;
    p.iterations = all[static_cast<std::size_t>(2 * i + 1)];
    p.mean = std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(ranks);
    p.median = median_of(means);
    p.max = *std::max_element(means.begin(), means.end());
    p.min = *std::min_element(means.begin(), means.end());
    if (p.name == kIterationSeries)
      out.iteration = p;
    else
      out.phases.push_back(p);
  }

  const double L = static_cast<double>(out.allreduce_bytes);
  const double factor = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;
  out.traffic_bytes = L * factor;
  // The bandwidth is the allreduce's own: its whole time, which under overlap is
  // "allreduce/total" (the "allreduce" phase is then only the part the step waited for).
  const PhaseSummary* timed = nullptr;
  for (const auto& p : out.phases)
    if (p.name == "allreduce/total" || (p.name == "allreduce" && timed == nullptr)) timed = &p;
  double seconds = timed != nullptr ? timed->mean : 0.0;
  if (timed == nullptr) {
    // A sharded step (ZeRO) moves an allreduce's bytes as its two halves: a reduce-scatter of the
    // gradients (under overlap its whole time is "reduce_scatter/total") and an allgather of
    // the parameters.
    const PhaseSummary *scatter = nullptr, *gather = nullptr;
    for (const auto& p : out.phases) {
      if (p.name == "reduce_scatter/total" || (p.name == "reduce_scatter" && scatter == nullptr)) scatter = &p;
      if (p.name == "allgather") gather = &p;
    }
    if (scatter != nullptr && gather != nullptr) seconds = scatter->mean + gather->mean;
  }
  if (seconds > 0) {
    out.algbw_gbps = L / seconds / 1e9;
    out.busbw_gbps = out.algbw_gbps * factor;
  }
  return out;
}

std::string format_table(const Summary& s) {
  double phases_sum = 0.0;
  for (const auto& p : s.phases)
    if (p.name.find('/') == std::string::npos) phases_sum += p.mean;
  const bool measured = s.iteration.iterations > 0 && s.iteration.mean > 0;
  const double iteration = measured ? s.iteration.mean : phases_sum;
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %10s %10s %10s %10s %7s\n", "phase (per iteration)", "mean ms", "median ms",
                "max ms", "min ms", "share");
  os << line;
  for (const auto& p : s.phases) {
    const bool sub = p.name.find('/') != std::string::npos;
    const std::string label = sub ? "  " + p.name.substr(p.name.find('/') + 1) : p.name;
    std::snprintf(line, sizeof line, "%-28s %10.3f %10.3f %10.3f %10.3f %6.1f%%\n", label.c_str(), p.mean * 1e3,
                  p.median * 1e3, p.max * 1e3, p.min * 1e3, iteration > 0 ? 100.0 * p.mean / iteration : 0.0);
    os << line;
  }
  std::snprintf(line, sizeof line, "%-28s %10.3f\n", "iteration (sum of phases)", phases_sum * 1e3);
  os << line;
  if (measured) {
    const PhaseSummary& it = s.iteration;
    std::snprintf(line, sizeof line, "%-28s %10.3f %10.3f %10.3f %10.3f %6.1f%%\n", "iteration (measured)",
                  it.mean * 1e3, it.median * 1e3, it.max * 1e3, it.min * 1e3, 100.0);
    os << line;
    // Under 90%: a step whose time the phases do not see, typically GPU work no phase waited for.
    if (phases_sum < 0.9 * it.mean) {
      std::snprintf(line, sizeof line,
                    "note: the phases cover %.0f%% of the iteration; on a GPU, timing that does not wait for the "
                    "device measures only the queueing of each phase's kernels (synchronized timing waits)\n",
                    100.0 * phases_sum / it.mean);
      os << line;
    }
  }
  const std::int64_t iters = s.phases.empty() ? 0 : s.phases.front().iterations;
  std::snprintf(line, sizeof line,
                "ranks p = %d, iterations = %lld (+%lld warm-up left out), gradient bytes L = %zu (%.2f MB)\n", s.ranks,
                static_cast<long long>(iters), static_cast<long long>(s.skipped_iterations), s.allreduce_bytes,
                static_cast<double>(s.allreduce_bytes) / 1e6);
  os << line;
  std::snprintf(line, sizeof line, "allreduce traffic 2L(p-1)/p = %.2f MB, algbw = %.3f GB/s, busbw = %.3f GB/s\n",
                s.traffic_bytes / 1e6, s.algbw_gbps, s.busbw_gbps);
  os << line;
  return os.str();
}

std::string to_json(const Summary& s) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : s.phases) {
    phases.push_back({{"name", p.name}, {"iterations", p.iterations}, {"mean_s", p.mean}, {"median_s", p.median},
                      {"max_s", p.max}, {"min_s", p.min}});
  }
  nlohmann::json j{{"ranks", s.ranks},
                   {"allreduce_bytes", s.allreduce_bytes},
                   {"traffic_bytes", s.traffic_bytes},
                   {"algbw_gbps", s.algbw_gbps},
                   {"busbw_gbps", s.busbw_gbps},
                   {"skipped_iterations", s.skipped_iterations},
                   {"phases", phases}};
  if (s.iteration.iterations > 0) {
    j["iteration"] = {{"iterations", s.iteration.iterations}, {"mean_s", s.iteration.mean},
                      {"median_s", s.iteration.median}, {"max_s", s.iteration.max}, {"min_s", s.iteration.min}};
  }
  return j.dump(2);
}

ScopedPhase::ScopedPhase(PhaseTimer& timer, std::string name, std::int64_t iteration)
    : timer_(timer), name_(std::move(name)), iteration_(iteration), start_(now_seconds()) {}

ScopedPhase::~ScopedPhase() { stop(); }

void ScopedPhase::stop() {
  if (stopped_) return;
  stopped_ = true;
  timer_.record(name_, start_, now_seconds() - start_, iteration_);
}

}  // namespace dpl::profile
