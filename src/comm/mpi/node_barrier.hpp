#pragma once
// The barrier of a node's shared window (node_shared_allreduce.hpp): a counter and a generation
// in memory that the node's processes share, each waiter polling briefly and then sleeping on a
// futex. Internal header.

#include <atomic>
#include <cstdint>

namespace dpl::comm::detail {

/// A counting barrier for the processes of one node, placed in memory they all map (constructed
/// once, by one of them, before the others see it). `generation` has a cache line of its own, so
/// that the ranks arriving (writing `arrived`) do not keep invalidating the line the waiting ranks
/// poll.
struct NodeBarrier {
  alignas(64) std::atomic<std::uint32_t> arrived{0};
  std::atomic<std::uint32_t> sleepers{0};  // ranks that are, or are about to be, asleep in the kernel
  alignas(64) std::atomic<std::uint32_t> generation{0};

  /// Returns once all `ranks` processes of the node have called it (each passes the same count).
  /// Every write a rank made before it is visible to every rank after it. `oversubscribed`: the
  /// machine runs more processes than it has CPUs, so a waiter sleeps at once instead of polling.
  void wait(int ranks, bool oversubscribed);
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "the node's barrier needs lock-free atomics: they are the only ones that work across processes");

}  // namespace dpl::comm::detail
