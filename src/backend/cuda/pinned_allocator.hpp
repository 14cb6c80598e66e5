#pragma once
// Cache of page-locked host blocks. A freed block returns to the cache only once every copy that
// was queued on the devices' compute and copy streams before the free has finished (events
// recorded at free time), so a buffer may be freed right after queueing an asynchronous copy
// from it.

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "dpl/core/cuda.hpp"

namespace dpl::backend::cuda_detail {

class PinnedAllocator {
 public:
  /// The process-wide instance (never destroyed; frees may come during exit).
  static PinnedAllocator& instance();

  /// A page-locked block of at least nbytes. Throws dpl::Error when the driver refuses.
  void* allocate(std::size_t nbytes);
  /// Returns p (from allocate) to the cache once the copies queued before now are done.
  void deallocate(void* p) noexcept;
  cuda::MemoryStats stats() const;

  /// Blocks are rounded up to this (a page).
  static constexpr std::size_t kRound = 4096;

 private:
  PinnedAllocator() = default;
  struct Pending {
    void* ptr;
    std::size_t size;
    std::vector<std::pair<int, cudaEvent_t>> events;  // (device, event recorded on one of its streams)
  };
  void reclaim_finished();  // caller holds mutex_

  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;        // size -> block
  std::unordered_map<void*, std::size_t> active_;  // block -> size
  std::vector<Pending> pending_;
  std::unordered_map<int, std::vector<cudaEvent_t>> spare_events_;  // per device: events belong to one
  cuda::MemoryStats stats_;
};

}  // namespace dpl::backend::cuda_detail
