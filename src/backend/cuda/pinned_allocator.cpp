#include "backend/cuda/pinned_allocator.hpp"

#include <algorithm>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda_api.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::cuda_detail {

PinnedAllocator& PinnedAllocator::instance() {
  static auto* a = new PinnedAllocator;  // leaked on purpose, see the class comment
  return *a;
}

void PinnedAllocator::reclaim_finished() {
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    bool done = true;
    for (const auto& [device, e] : p.events) {
      const cudaError_t st = cudaEventQuery(e);
      if (st == cudaErrorNotReady) {
        done = false;
        break;
      }
      if (st != cudaSuccess) cudaGetLastError();  // a failed device: nothing is pending any more
    }
    if (!done) {
      ++i;
      continue;
    }
    for (const auto& [device, e] : p.events) spare_events_[device].push_back(e);
    free_.emplace(p.size, p.ptr);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

void* PinnedAllocator::allocate(std::size_t nbytes) {
  DPL_CHECK(cuda_device_count() > 0, "cuda::pinned_allocate: page-locked memory needs a GPU, and none is available");
  const std::size_t size = (std::max<std::size_t>(nbytes, 1) + kRound - 1) / kRound * kRound;
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_finished();
  // Best fit, but never more than twice the request: a huge cached buffer should not be pinned
  // down by a small one.
  auto it = free_.lower_bound(size);
  void* p = nullptr;
  std::size_t got = size;
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second;
    got = it->first;
    free_.erase(it);
    stats_.cached -= got;
  } else {
    const cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      DPL_FAIL("cuda::pinned_allocate: page-locked allocation of ", size, " bytes failed (", cudaGetErrorString(err),
               "); pinned in use ", stats_.current, " bytes");
    }
    stats_.reserved += size;
    stats_.driver_allocs += 1;
  }
  active_.emplace(p, got);
  stats_.current += got;
  if (stats_.current > stats_.peak) stats_.peak = stats_.current;
  stats_.allocations += 1;
  return p;
}

void PinnedAllocator::deallocate(void* p) noexcept {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(p);
  if (it == active_.end()) return;
  Pending pend{p, it->second, {}};
  active_.erase(it);
  stats_.current -= pend.size;
  stats_.cached += pend.size;
  // One event per device stream that exists (compute, copy and the side streams of overlapped
  // allreduces): copies from or to this block can only have been queued on those.
  for (int d = 0; d < cuda_device_count(); ++d) {
    CudaDevice* k = CudaDevice::get_if_created(d);
    if (k == nullptr) continue;
    std::vector<cudaStream_t> streams = k->side_streams();
    streams.push_back(k->compute_stream());
    streams.push_back(k->copy_stream());
    for (cudaStream_t stream : streams) {
      std::vector<cudaEvent_t>& spare = spare_events_[d];
      cudaEvent_t e = nullptr;
      if (!spare.empty()) {
        e = spare.back();
        spare.pop_back();
      }
      int previous = -1;
      cudaGetDevice(&previous);
      if (previous != d) cudaSetDevice(d);
      bool ok = true;
      if (e == nullptr) ok = cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess;
      if (ok) ok = cudaEventRecord(e, stream) == cudaSuccess;
      if (previous >= 0 && previous != d) cudaSetDevice(previous);
      if (!ok) {
        cudaGetLastError();
        // The reuse cannot be ordered: keep the block out of the cache for good rather than risk it.
        if (e != nullptr) spare.push_back(e);
        for (const auto& [device, pe] : pend.events) spare_events_[device].push_back(pe);
        stats_.cached -= pend.size;
        return;
      }
      pend.events.emplace_back(d, e);
    }
  }
  pending_.push_back(std::move(pend));
}

cuda::MemoryStats PinnedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace dpl::backend::cuda_detail

namespace dpl::backend::cuda_api {

void* pinned_allocate(std::size_t nbytes) { return cuda_detail::PinnedAllocator::instance().allocate(nbytes); }

void pinned_free(void* p) noexcept { cuda_detail::PinnedAllocator::instance().deallocate(p); }

cuda::MemoryStats pinned_stats() { return cuda_detail::PinnedAllocator::instance().stats(); }

}  // namespace dpl::backend::cuda_api
