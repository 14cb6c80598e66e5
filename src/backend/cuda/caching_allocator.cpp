#include "backend/cuda/caching_allocator.hpp"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::backend::cuda_detail {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Folds block b's right neighbour into b and deletes it; neither may be in a pool (a pool orders
// by size). A template so that it takes CachingAllocator's private Block.
template <typename Block>
void absorb_next(Block* b) {
  Block* next = b->next;
  b->size += next->size;
  b->next = next->next;
  if (next->next) next->next->prev = b;
  delete next;
}
}  // namespace

bool caching_enabled_by_env() {
  // Read once: every allocator takes its mode at construction, and caching_enabled() must keep
  // reporting that mode even if the program changes its environment later.
  static const bool on = settings().cuda_caching;
  return on;
}

CachingAllocator::CachingAllocator(int device, bool caching) : device_(device), caching_(caching) {}

CachingAllocator::~CachingAllocator() = default;  // the instances live until process exit

void CachingAllocator::note_allocated(std::size_t size) {
  stats_.current += size;
  if (stats_.current > stats_.peak) stats_.peak = stats_.current;
  stats_.allocations += 1;
}

void* CachingAllocator::allocate_uncached(std::size_t size) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    cudaGetLastError();
    DPL_FAIL("cuda:", device_, ": out of memory allocating ", size, " bytes (", cudaGetErrorString(err),
             "); in use ", stats_.current, " bytes");
  }
  uncached_.emplace(p, size);
  stats_.reserved += size;
  stats_.driver_allocs += 1;
  note_allocated(size);
  return p;
}

CachingAllocator::Block* CachingAllocator::new_segment(std::size_t segment_size, bool small, int pool_id) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, segment_size);
  if (err == cudaErrorMemoryAllocation) {
    // Give the cache back and try once more before failing: fragmentation across pools is the
    // usual reason a cached allocator runs out first.
    cudaGetLastError();
    release_free_segments();
    err = cudaMalloc(&p, segment_size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    DPL_FAIL("cuda:", device_, ": out of memory allocating a segment of ", segment_size, " bytes (",
             cudaGetErrorString(err), "); in use ", stats_.current, " bytes, cached ", stats_.cached, " bytes");
  }
  stats_.reserved += segment_size;
  stats_.cached += segment_size;
  stats_.driver_allocs += 1;
  auto* b = new Block;
  b->ptr = p;
  b->size = segment_size;
  b->small = small;
  b->pool = pool_id;
  return b;
}

CachingAllocator::Block* CachingAllocator::take_from_pool(Pool& pool, std::size_t size, bool small, int pool_id) {
  Block key;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  Block* b = nullptr;
  if (it != pool.end()) {
    b = *it;
    pool.erase(it);
  } else {
    const std::size_t seg = small ? kSmallSegment
                                  : (size < kMidRequest ? kLargeSegment : round_up(size, kLargeRound));
    b = new_segment(seg, small, pool_id);
  }
  // Split off the tail when it is worth keeping: any remainder in the small pool, only sizeable
  // ones in the large pool (small tails of big blocks would just fragment it).
  const std::size_t rest = b->size - size;
  if (rest >= (small ? kRound : kSmallRequest)) {
    auto* tail = new Block;
    tail->ptr = static_cast<char*>(b->ptr) + size;
    tail->size = rest;
    tail->small = small;
    tail->pool = pool_id;
    tail->prev = b;
    tail->next = b->next;
    if (b->next) b->next->prev = tail;
    b->next = tail;
    b->size = size;
    pool.insert(tail);
  }
  return b;
}

void* CachingAllocator::allocate(std::size_t nbytes) {
  const std::size_t size = round_up(nbytes == 0 ? 1 : nbytes, kRound);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!caching_) return allocate_uncached(size);
  const bool small = size <= kSmallRequest;
  const Route* route = route_of_this_thread();
  const int pool_id = route != nullptr ? route->pool : 0;
  Pools& pools = pools_[pool_id];
  Block* b = take_from_pool(small ? pools.small : pools.large, size, small, pool_id);
  b->allocated = true;
  active_.emplace(b->ptr, b);
  stats_.cached -= b->size;
  note_allocated(b->size);
  return b->ptr;
}

void CachingAllocator::deallocate(void* p) noexcept {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!caching_) {
    auto it = uncached_.find(p);
    if (it == uncached_.end()) return;
    stats_.current -= it->second;
    stats_.reserved -= it->second;
    stats_.driver_frees += 1;
    uncached_.erase(it);
    // cudaFree waits for the device, so queued kernels that still read p finish first. Errors
    // are ignored: at process exit the runtime may be unloaded already.
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    cudaFree(p);
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
    cudaGetLastError();
    return;
  }
  auto it = active_.find(p);
  if (it == active_.end()) return;
  Block* b = it->second;
  active_.erase(it);
  const Route* route = route_of_this_thread();
  if (route != nullptr && route->hold_shared_frees && b->pool == 0) {
    // Work queued on the routed thread's side stream may still read it: reused once that stream
    // is waited for (release_held).
    held_[route->pool].push_back(b);
    return;
  }
  free_block(b);
}

const CachingAllocator::Route* CachingAllocator::route_of_this_thread() const {
  if (routes_.empty()) return nullptr;
  const std::thread::id me = std::this_thread::get_id();
  for (const Route& r : routes_)
    if (r.thread == me) return &r;
  return nullptr;
}

void CachingAllocator::release_held(int id) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(id);
  if (it == held_.end()) return;
  for (Block* b : it->second) free_block(b);
  held_.erase(it);
}

void CachingAllocator::free_block(Block* b) {
  b->allocated = false;
  stats_.current -= b->size;
  stats_.cached += b->size;
  Pool& pool = free_list(b);
  // Merge with free neighbours so that a later, larger request can use the space again.
  if (b->prev && !b->prev->allocated) {
    Block* prev = b->prev;
    pool.erase(prev);
    absorb_next(prev);
    b = prev;
  }
  if (b->next && !b->next->allocated) {
    pool.erase(b->next);
    absorb_next(b);
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  bool synced = false;
  Pools& shared = pools_[0];
  for (Pool* pool : {&shared.small, &shared.large}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment that is partly in use
        ++it;
        continue;
      }
      if (!synced) {
        // Blocks freed by the host may still be read by queued kernels.
        cudaDeviceSynchronize();
        synced = true;
      }
      cudaFree(b->ptr);
      stats_.reserved -= b->size;
      stats_.cached -= b->size;
      stats_.driver_frees += 1;
      it = pool->erase(it);
      delete b;
    }
  }
  cudaGetLastError();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  release_free_segments();
}

int CachingAllocator::open_private_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  DPL_CHECK(caching_, "cuda:", device_, ": recording a CUDA graph needs the caching allocator, but "
            "DPL_CUDA_NO_CACHING=1 turned it off (every free would return memory the graph still uses)");
  const int id = next_pool_++;
  pools_[id];
  return id;
}

void CachingAllocator::route_to_pool(int id, bool hold_shared_frees) {
  std::lock_guard<std::mutex> lock(mutex_);
  DPL_CHECK(pools_.count(id) == 1 && id != 0, "CachingAllocator::route_to_pool: no private pool ", id);
  const Route* mine = route_of_this_thread();
  DPL_CHECK(mine == nullptr, "cuda:", device_, ": this thread's allocations already go to private pool ", mine->pool,
            " (a CUDA graph being recorded, or the overlapped allreduce's side stream)");
  routes_.push_back(Route{std::this_thread::get_id(), id, hold_shared_frees});
}

void CachingAllocator::stop_routing() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::thread::id me = std::this_thread::get_id();
  for (auto it = routes_.begin(); it != routes_.end(); ++it)
    if (it->thread == me) {
      routes_.erase(it);
      return;
    }
}

void CachingAllocator::close_private_pool(int id) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  if (id == 0 || it == pools_.end()) return;
  // Held blocks were the shared cache's all along; the caller has waited for the pool's stream.
  if (auto held = held_.find(id); held != held_.end()) {
    for (Block* b : held->second) free_block(b);
    held_.erase(held);
  }
  // Blocks still in use become the shared cache's when freed; free ones join it now. A segment's
  // blocks all change pool together, so merging neighbours never mixes pools.
  for (auto& [ptr, b] : active_)
    if (b->pool == id) b->pool = 0;
  Pools& shared = pools_[0];
  for (Pool* from : {&it->second.small, &it->second.large})
    for (Block* b : *from) {
      b->pool = 0;
      (b->small ? shared.small : shared.large).insert(b);
    }
  pools_.erase(it);
}

cuda::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.current;
}

}  // namespace dpl::backend::cuda_detail
