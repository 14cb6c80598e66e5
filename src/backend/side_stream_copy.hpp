#pragma once
// Host-to-device copies beside the compute stream, for input batches: the copy of the next batch
// runs on the GPU's copy stream while the compute stream trains on the current one. No CUDA
// header: defined by the CUDA backend (src/backend/cuda/side_stream_copy.cpp) and, in builds
// without it, by a stand-in that says so (src/backend/no_cuda/cuda_stand_ins.cpp).

#include "dpl/core/device.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend {

/// A group of host-to-device copies queued on one GPU's copy stream, ordered against its compute
/// stream by events and never by a host wait unless wait() is called.
///
/// Ordering, and what it makes safe:
///  - the copies start after all work queued on the compute stream before the constructor, so a
///    destination that the caching allocator (ordered on the compute stream) just handed out is
///    no longer in use by an earlier owner's kernels;
///  - kernels read the destinations only when queued after order_compute_after();
///  - a host source may be rewritten or handed back to its owner only after wait().
/// The destructor makes the compute stream wait for the copies (so that a destination freed later
/// is reused only after them) and never blocks the host.
class SideStreamCopy {
 public:
  /// Nothing in flight: the other calls do nothing.
  SideStreamCopy() = default;
  /// Starts a group on GPU `device`. Throws dpl::Error for a CPU device, a GPU that does not exist,
  /// and in a build without the CUDA backend.
  explicit SideStreamCopy(Device device);
  ~SideStreamCopy();
  SideStreamCopy(SideStreamCopy&& other) noexcept;
  SideStreamCopy& operator=(SideStreamCopy&& other) noexcept;
  SideStreamCopy(const SideStreamCopy&) = delete;
  SideStreamCopy& operator=(const SideStreamCopy&) = delete;

  /// Queues dst = src on the copy stream: src a contiguous host tensor (page-locked, or the driver
  /// copies synchronously and nothing overlaps), dst a contiguous tensor of src's shape and dtype
  /// on the group's GPU. Throws dpl::Error naming what differs.
  void copy(const Tensor& src, Tensor& dst);
  /// Makes the compute stream wait on the device (not the host) for the copies queued so far.
  void order_compute_after() const;
  /// Blocks the host until the copies queued so far are done.
  void wait() const;
  /// True for a group started on a GPU (not default-constructed or moved from).
  bool active() const { return done_ != nullptr; }

 private:
  void reset() noexcept;

  int device_ = -1;
  void* done_ = nullptr;  // the event recorded after the last copy (a cudaEvent_t)
};

}  // namespace dpl::backend
