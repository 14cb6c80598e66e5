#pragma once
// Stream-ordered caching allocator for the device memory of one GPU.
//
// All work of a device runs on its one compute stream, so a block freed by the host may be
// handed to the next allocation at once: anything queued later on that stream runs after the
// kernels that still read the old contents. Blocks come from cudaMalloc'd segments, are split to
// fit and merged again with free neighbours; after the first iterations of a training loop every
// request is served from the cache and the hot path never calls cudaMalloc or cudaFree.
// DPL_CUDA_NO_CACHING=1 turns the cache off (every allocate is a cudaMalloc, every free a
// cudaFree), which lets compute-sanitizer see each buffer on its own.
//
// Private pools serve work that is not ordered on the compute stream, while a thread is routed
// to one: its allocations come from segments of that pool only, and blocks return to the pool
// they came from.
//  - The recording of a CUDA graph: a recorded graph replays its kernels on the same addresses,
//    so none of them may be handed to other work in between; the pool keeps them until the graph
//    is gone (close_private_pool).
//  - A side stream (backend/side_lane.hpp): the pool's blocks are ordered on that stream instead.
//    A block of the shared cache that the routed thread frees may still be read there, so it is
//    held back until release_held() (after the compute stream has been made to wait for the side
//    stream).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dpl/core/cuda.hpp"

namespace dpl::backend::cuda_detail {

/// True unless DPL_CUDA_NO_CACHING is set to a non-zero value (read once).
bool caching_enabled_by_env();

class CachingAllocator {
 public:
  /// An allocator for device; caching as caching_enabled_by_env() says.
  explicit CachingAllocator(int device, bool caching = caching_enabled_by_env());
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least nbytes (512-byte aligned; nbytes 0 gives a minimal block). Throws
  /// dpl::Error when the device is out of memory even after the cache has been released.
  void* allocate(std::size_t nbytes);
  /// Returns p (from allocate) to the cache. Never throws: it runs from destructors, also
  /// during process exit when the CUDA runtime may already be gone.
  void deallocate(void* p) noexcept;
  /// Returns every wholly free segment to the driver.
  void empty_cache();
  cuda::MemoryStats stats() const;
  void reset_peak();
  bool caching() const { return caching_; }

  /// Requests are rounded up to a multiple of this.
  static constexpr std::size_t kRound = 512;
  /// Requests up to this size share small segments; bigger ones get large segments.
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;
  /// Segment size of the small pool.
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
  /// Large requests below this get a segment of kLargeSegment, so a few of them share one.
  static constexpr std::size_t kMidRequest = std::size_t{10} << 20;
  static constexpr std::size_t kLargeSegment = std::size_t{20} << 20;
  /// Large segments are rounded up to this.
  static constexpr std::size_t kLargeRound = std::size_t{2} << 20;

  /// A new private pool (see the file comment); its id is never 0. Requires caching (dpl::Error
  /// otherwise: without the cache every free is a cudaFree, which a graph cannot survive).
  int open_private_pool();
  /// From now until stop_routing(), allocations made by the calling thread come from pool id;
  /// with hold_shared_frees, blocks of the shared cache it frees are held until release_held(id).
  /// Requires a thread not routed already (else dpl::Error).
  void route_to_pool(int id, bool hold_shared_frees = false);
  /// Ends the calling thread's route (nothing when it has none).
  void stop_routing();
  /// Returns the shared-cache blocks held for pool id's routes to the shared cache.
  void release_held(int id) noexcept;
  /// Gives pool id's blocks back to the shared cache: its free blocks at once, the others when
  /// freed. Call when the graph that used the pool is destroyed. Never throws.
  void close_private_pool(int id) noexcept;

 private:
  struct Block {
    void* ptr = nullptr;
    std::size_t size = 0;
    bool allocated = false;
    bool small = false;
    int pool = 0;  // 0: the shared cache; otherwise a private pool
    Block* prev = nullptr;  // neighbours within the same segment
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      if (a->size != b->size) return a->size < b->size;
      return reinterpret_cast<std::uintptr_t>(a->ptr) < reinterpret_cast<std::uintptr_t>(b->ptr);
    }
  };
  using Pool = std::set<Block*, BySize>;
  struct Pools {
    Pool small, large;
  };

  void* allocate_uncached(std::size_t size);
  Block* take_from_pool(Pool& pool, std::size_t size, bool small, int pool_id);
  Block* new_segment(std::size_t segment_size, bool small, int pool_id);
  Pool& free_list(const Block* b) { return b->small ? pools_[b->pool].small : pools_[b->pool].large; }
  void release_free_segments();  // caller holds mutex_
  void note_allocated(std::size_t size);

  const int device_;
  const bool caching_;
  mutable std::mutex mutex_;
  std::map<int, Pools> pools_;  // 0: the shared cache
  int next_pool_ = 1;
  struct Route {
    std::thread::id thread;
    int pool = 0;
    bool hold_shared_frees = false;
  };
  std::vector<Route> routes_;                  // one per routed thread (few: a recording, a side lane)
  std::map<int, std::vector<Block*>> held_;    // pool id -> shared blocks freed by its routed thread
  const Route* route_of_this_thread() const;  // caller holds mutex_; null when not routed
  void free_block(Block* b);                   // caller holds mutex_: back to its pool, merged
  std::unordered_map<void*, Block*> active_;
  std::unordered_map<void*, std::size_t> uncached_;  // no-caching mode: pointer -> size
  cuda::MemoryStats stats_;
};

}  // namespace dpl::backend::cuda_detail
