#pragma once
// The sub-phase timing of the multi-step device allreduces (hierarchical, two_dimensional,
// flat): CUDA events marking where each step begins and ends, in two sets used in turn.
//
// Reading an event's time needs the event to have completed, which would be a host wait. So
// finish() of call N reads the times of the latest earlier call whose events had completed by
// then (zeros at first), and the host never waits for them; with `synchronized` it waits for
// call N's last event and reads call N's own times.

#include <cuda_runtime.h>

#include <array>
#include <vector>

#include "dpl/comm/communicator.hpp"

namespace dpl::comm::detail {

/// Where an event is recorded: around the intra-node reduction, the device-to-host copies, the
/// host-to-device copies and the intra-node gather.
enum PhaseMark { kIntraBegin, kIntraEnd, kD2hBegin, kD2hEnd, kH2dBegin, kH2dEnd, kGatherBegin, kGatherEnd, kMarks };

/// Seconds of each sub-phase of one call.
struct PhaseTimes {
  double intra_reduce = 0, d2h = 0, inter_allreduce = 0, h2d = 0, intra_gather = 0;
};

class PhaseEvents {
 public:
  PhaseEvents() = default;
  /// Frees the events; never throws.
  ~PhaseEvents();
  PhaseEvents(const PhaseEvents&) = delete;
  PhaseEvents& operator=(const PhaseEvents&) = delete;

  /// Creates the events on `device` on the first call; later calls do nothing.
  void create(int device);
  /// Records this call's event `mark` on stream s. Requires create().
  void record(PhaseMark mark, cudaStream_t s);
  /// This call's event `mark` (for steps that record it themselves).
  cudaEvent_t event(PhaseMark mark) const { return events_[cur_][mark]; }
  /// Ends this call, whose kGatherEnd has been recorded last and whose MPI step took
  /// inter_seconds on the host, and returns the times to report (see above). The next record()
  /// goes to the other set.
  PhaseTimes finish(double inter_seconds, bool synchronized);

 private:
  std::array<std::array<cudaEvent_t, kMarks>, 2> events_{};  // this call's and the previous call's
  std::array<bool, 2> have_{false, false};
  std::array<double, 2> inter_{0.0, 0.0};
  PhaseTimes shown_;  // the times last read from events
  int cur_ = 0;
  bool created_ = false;
};

/// The five sub-phases of hierarchical and two_dimensional, in the order every rank reports them.
std::vector<SubPhase> node_phases(const PhaseTimes& t);
/// The three sub-phases of flat, in the order every rank reports them.
std::vector<SubPhase> flat_phases(const PhaseTimes& t);

}  // namespace dpl::comm::detail
