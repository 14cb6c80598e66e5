#pragma once
// A second stream of one GPU for work that a second host thread queues while the first keeps
// queueing the compute stream: the overlapped gradient allreduce, whose bucket worker reduces a
// bucket of gradients while backward still runs. No CUDA header: defined by the CUDA backend
// (src/backend/cuda/side_lane.cpp) and, in builds without it, by a stand-in that says so
// (src/backend/no_cuda/cuda_stand_ins.cpp).
//
// Ordering, and what it makes safe:
//  - item k's work starts on the side stream only after the compute stream reached mark_ready(k),
//    so it reads gradients backward has finished;
//  - while a thread is inside a Scope, every kernel and copy it queues on the device goes to the
//    side stream (and the communicators' "compute stream" is the side stream), and its device
//    allocations come from a pool of the lane's own, ordered on the side stream; blocks of the
//    shared cache it frees are held until join();
//  - join() makes the compute stream wait for everything queued on the side stream, so the
//    optimizer reads reduced gradients and freed memory is reused only after the side stream's
//    last use. Until join(), nothing on the compute stream may touch what the items write.
// cuBLAS, cuDNN and the one-launch reductions stay on the compute stream: a routed thread that
// reaches them gets a dpl::Error.

#include <cstddef>
#include <vector>

namespace dpl::backend {

class SideLane {
 public:
  /// A lane on GPU `device`: a non-blocking stream, its events and its allocation pool. Throws
  /// dpl::Error for a GPU that does not exist, and in a build without the CUDA backend.
  explicit SideLane(int device);
  /// Waits for the side stream, then gives its pool back to the shared cache. Never throws.
  ~SideLane();
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;

  int device() const { return device_; }

  /// Main thread, before a round of `items` items is handed to the other thread: makes their
  /// events (the two threads then only read the lane's tables).
  void prepare(std::size_t items);
  /// Main thread: item k (< prepare()'s items) may start once the compute stream has reached the
  /// work queued so far.
  void mark_ready(std::size_t k);
  /// Main thread: the end of backward, the point the exposed time is counted from.
  void mark_backward_end();

  /// The calling thread's device work goes to the lane for the scope's lifetime (and its current
  /// device is the lane's). Scopes do not nest.
  class Scope {
   public:
    explicit Scope(SideLane& lane);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SideLane& lane_;
    int previous_device_ = -1;
  };
  /// Inside a Scope: item k's work starts after mark_ready(k); its start is timed from here.
  void begin_item(std::size_t k);
  /// Inside a Scope: item k's work is all queued; its end is timed from here.
  void end_item(std::size_t k);

  /// Main thread, once every item's work is queued: the compute stream waits for the side stream,
  /// and the shared-cache blocks the items freed go back to the cache.
  void join();

  /// Device times of the last round of `items` items, in seconds relative to the moment the side
  /// stream finished that round (starts are <= 0, backward's end may be later): waits on the host
  /// until both the side stream and backward have finished, so that the caller can anchor them
  /// to its clock right after. Call after join().
  struct Times {
    std::vector<double> start, seconds;  // per item; both 0 for an item never begun
    double backward_end = 0.0;           // mark_backward_end(), relative to the same moment
  };
  Times times(std::size_t items);

 private:
  void release() noexcept;

  int device_ = -1;
  void* stream_ = nullptr;  // cudaStream_t
  int pool_ = 0;            // the allocation pool (0 when the allocator does not cache)
  std::vector<void*> ready_, begin_, end_;  // cudaEvent_t per item
  std::vector<char> begun_;  // per item, written by the routed thread (not vector<bool>: no shared words)
  void* backward_end_ = nullptr;
  void* finished_ = nullptr;
};

}  // namespace dpl::backend
