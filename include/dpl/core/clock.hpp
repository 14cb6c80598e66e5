#pragma once
// The library's clock: every timestamp dpl records (phase timers, communicator sub-phases, the
// overlapped allreduce's times, traces) reads this one clock, so that times of different layers
// can be subtracted from each other.

namespace dpl {

/// Wall-clock seconds since an arbitrary fixed point of this process (steady clock: never goes
/// back). Differences of two readings are durations; a reading means nothing across processes
/// (profile::agree_on_clock relates the ranks' clocks).
double now_seconds();

}  // namespace dpl
