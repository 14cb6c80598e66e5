#pragma once
// How the ranks of a node write the shared window of the host allreduce: with ordinary (cached)
// stores or with streaming (non-temporal) ones. Pure logic, so that it can be tested without MPI;
// the window (src/comm/mpi/node_shared_allreduce.cpp) measures and the node's first rank decides.
//
// Why both: a rank writes window lines that its partners read a moment ago. Ordinary stores must
// first take each line away from the partners' caches; when the ranks' cores share a cache that is
// cheap, and the partners then read the new data from that cache. On virtual machines whose CPUs
// the host moves, the same stores were measured 5-12x slower (1.7-2.4 GB/s) for minutes at a
// time, while streaming stores, which skip the caches, kept 12-23 GB/s. When caches are shared,
// streaming costs instead: the partners read from memory (allreduces 1.3-1.5x slower). Which one wins depends on the machine and its moment, so each node measures.
// docs/communicators.md ("Host memory: the node's shared window") has the measurements.

#include <algorithm>
#include <cstdint>

namespace dpl::comm::detail {

class WindowStoreChoice {
 public:
  /// Whether the chunk decided now should use streaming stores. Called once per chunk, in chunk
  /// order; the chunk it decides for may run a little later (the decision travels through the
  /// window), and record() gets the measurement when it has run.
  bool decide() {
    ++decisions_;
    if (!known_[kCached]) return false;  // measure ordinary stores first...
    if (!known_[kStreaming]) return true;  // ...then streaming ones once
    const int best = estimate_[kStreaming] < estimate_[kCached] ? kStreaming : kCached;
    if (decisions_ >= next_probe_) {
      // Now and then the other kind again: what the machine favours can change while it runs.
      next_probe_ = decisions_ + probe_every_;
      probe_every_ = std::min(probe_every_ * 2, kMaxProbeEvery);
      return best != kStreaming;
    }
    return best == kStreaming;
  }

  /// A chunk written with `streaming` stores took `seconds_per_byte` in the node's passes.
  void record(bool streaming, double seconds_per_byte) {
    const int kind = streaming ? kStreaming : kCached;
    const int before = best_known();
    // The last few chunks weigh most: a probe of the other kind is one sample, so it replaces
    // that kind's old estimate; the kind in use averages its chunks.
    if (!known_[kind] || kind != before) {
      estimate_[kind] = seconds_per_byte;
    } else {
      estimate_[kind] += kWeight * (seconds_per_byte - estimate_[kind]);
    }
    known_[kind] = true;
    // After a switch, look at the other kind again soon: the measurement that switched may have
    // been a moment's.
    if (before >= 0 && best_known() != before) {
      probe_every_ = kMinProbeEvery;
      next_probe_ = decisions_ + kMinProbeEvery;
    }
  }

  /// The kind in use when both are known: true for streaming. For tests and logs.
  bool prefers_streaming() const { return best_known() == kStreaming; }

  static constexpr std::int64_t kMinProbeEvery = 8;
  static constexpr std::int64_t kMaxProbeEvery = 256;

 private:
  static constexpr int kCached = 0;
  static constexpr int kStreaming = 1;
  static constexpr double kWeight = 0.25;

  int best_known() const {
    if (!known_[kCached] || !known_[kStreaming]) return -1;
    return estimate_[kStreaming] < estimate_[kCached] ? kStreaming : kCached;
  }

  double estimate_[2] = {0, 0};
  bool known_[2] = {false, false};
  std::int64_t decisions_ = 0;
  std::int64_t next_probe_ = kMinProbeEvery;
  std::int64_t probe_every_ = kMinProbeEvery;
};

}  // namespace dpl::comm::detail
