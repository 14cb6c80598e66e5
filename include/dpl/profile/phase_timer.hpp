#pragma once
// Phase timers: how long each part of a data-parallel update takes, per rank, per iteration,
// and what bandwidth the allreduce reached.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/core/clock.hpp"

namespace dpl::comm {
class Communicator;
}

namespace dpl::profile {

/// Non-intrusive (default): phases are timed as they run; nothing waits for the timers.
/// Synchronized: a barrier across ranks (and a device synchronisation) separates the phases, so
/// each rank's time is attributed cleanly to one phase — slower, for profiling.
enum class TimingMode { kNonIntrusive, kSynchronized };

/// The library's clock (dpl/core/clock.hpp), under the name the phase timers' users know.
using dpl::now_seconds;

/// A moment on this rank's clocks that per-rank traces can be aligned on. The steady clock that
/// timestamps the phases has an arbitrary origin on each process, so traces of different ranks
/// share no time axis until each records its steady time at a moment the ranks agree on.
struct ClockReference {
  double steady = 0.0;  ///< now_seconds() at the moment
  double wall = 0.0;    ///< the system clock at the same moment, seconds since the Unix epoch
  /// "barrier": every rank read its clocks on leaving the same barrier (agree_on_clock), so the
  /// steady times name one instant to within a barrier's exit skew; "" when none was set.
  std::string method;
};

/// Collective over comm (every rank must call it; comm may be null for one process): a barrier to
/// gather the ranks, a second one they leave together, then both clocks read back to back.
/// Ensures the returned steady times of all ranks name the same instant to within the second
/// barrier's exit skew (about one message latency: microseconds on one host).
ClockReference agree_on_clock(comm::Communicator* comm);

/// One timed interval of one phase.
struct PhaseSample {
  double start = 0.0;    // now_seconds() at the start
  double seconds = 0.0;  // duration
  std::int64_t iteration = 0;
};

/// The series a training loop records around each whole update (train::StandardUpdater does):
/// from asking for the batch until the device has finished the update's work. It is not a phase
/// beside the others: they lie inside it, and the difference is what no phase covers (the loop's
/// own work, and under non-intrusive timing on a GPU the wait for the device, since a phase that
/// does not wait measures only the queueing of its kernels). summarize() reports it apart.
inline constexpr const char* kIterationSeries = "iteration";

/// All samples of one named phase on this rank, in recording order.
struct PhaseSeries {
  std::string name;  // "data", "compute", "prepare", "allreduce", "optimize", "<phase>/<sub-phase>"
                     // ("compute/forward", "allreduce/bucket0/intra_reduce", ...), "buffers"
                     // (parallel::MultiNodeOptimizer::synchronize_buffers), "step" (a recorded step
                     // replayed, parallel::MultiNodeOptimizer::set_replay_mode), or kIterationSeries
  std::vector<PhaseSample> samples;
};

/// Collects the phase times of this rank. Phases appear in the order first recorded.
class PhaseTimer {
 public:
  /// Adds one sample of phase `name` for iteration `iteration`.
  void record(const std::string& name, double start, double seconds, std::int64_t iteration);
  /// The series recorded so far.
  const std::vector<PhaseSeries>& series() const { return series_; }
  /// The series named `name`, or null.
  const PhaseSeries* find(const std::string& name) const;
  /// Forgets every sample (e.g. after warm-up).
  void clear();

  /// Gradient bytes L moved by each allreduce and the number of ranks p, for the bandwidth
  /// figures: traffic per rank = 2L(p-1)/p, algbw = L / t, busbw = algbw * 2(p-1)/p.
  void set_allreduce_size(std::size_t bytes, int ranks) {
    bytes_ = bytes;
    ranks_ = ranks;
  }
  std::size_t allreduce_bytes() const { return bytes_; }
  int ranks() const { return ranks_; }

  /// Keeps the agreed moment write_chrome_trace records (see agree_on_clock; the Trainer sets it
  /// when training starts). clear() keeps it.
  void set_clock_reference(const ClockReference& reference) { clock_ = reference; }
  const ClockReference& clock_reference() const { return clock_; }

  /// Writes every sample as a Chrome trace (chrome://tracing, Perfetto) JSON file; pid = rank,
  /// top-level phases on thread 0, sub-phases ("allreduce/...") on thread 1, times in
  /// microseconds of this rank's steady clock. "otherData" holds what tools/merge_traces.py needs
  /// to put several ranks on one time axis: "rank", "steady_s" and "wall_s" (both clocks read
  /// back to back while writing) and, when a clock reference was set, "sync_steady_s",
  /// "sync_wall_s" and "sync_method". Throws dpl::Error when the file cannot be written.
  void write_chrome_trace(const std::string& path, int rank) const;

 private:
  std::vector<PhaseSeries> series_;
  ClockReference clock_;
  std::size_t bytes_ = 0;
  int ranks_ = 1;
};

/// Statistics of one phase across ranks. Each rank first reduces its own samples to a mean and
/// a median over iterations; mean/median/max below are taken across ranks of the per-rank means.
struct PhaseSummary {
  std::string name;
  std::int64_t iterations = 0;  // samples per rank (rank 0's count)
  double mean = 0.0;            // seconds: mean over ranks of the per-rank mean
  double median = 0.0;          // seconds: median over ranks of the per-rank mean
  double max = 0.0;             // seconds: slowest rank's mean
  double min = 0.0;             // seconds: fastest rank's mean
};

/// The whole summary: every phase, the allreduce size and the bandwidth it reached.
struct Summary {
  int ranks = 1;
  std::size_t allreduce_bytes = 0;
  double traffic_bytes = 0.0;      // per rank per allreduce: 2L(p-1)/p
  double algbw_gbps = 0.0;         // L / mean allreduce time, GB/s (1e9 bytes)
  double busbw_gbps = 0.0;         // algbw * 2(p-1)/p
  std::int64_t skipped_iterations = 0;
  std::vector<PhaseSummary> phases;  // every series but kIterationSeries, in recording order
  PhaseSummary iteration;            // kIterationSeries; iterations == 0 where none was recorded
};

/// Summarises timer over all ranks of comm (a collective: every rank must call it with timers
/// that recorded the same phases; comm may be null for one process). The first `skip`
/// iterations (warm-up) are left out where more remain.
Summary summarize(const PhaseTimer& timer, comm::Communicator* comm, std::int64_t skip = 1);

/// A fixed-width text table of the summary (milliseconds, share of an iteration, bandwidth). Shares
/// are of the measured iteration where one was recorded, else of the sum of the top-level phases.
std::string format_table(const Summary& summary);
/// The summary as a JSON object (seconds and bytes, GB/s).
std::string to_json(const Summary& summary);

/// Measures a scope into a PhaseTimer: start on construction, record on stop() or destruction.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimer& timer, std::string name, std::int64_t iteration);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;
  /// Records now; later stops do nothing.
  void stop();

 private:
  PhaseTimer& timer_;
  std::string name_;
  std::int64_t iteration_;
  double start_;
  bool stopped_ = false;
};

}  // namespace dpl::profile
