#pragma once
// The thread that runs the overlapped gradient allreduce: one blocking allreduce per bucket, in
// bucket order, each as soon as the main thread (running backward) has marked it ready. On the
// host the main thread also fills and checks each bucket as it marks it (with the rank's threads,
// between backward's ops), so that the worker's one thread only communicates.
//
// On a GPU the buckets' work is queued, not run, by this thread: on a side stream of the GPU
// (backend::SideLane), each bucket after the compute stream has reached the point where the main
// thread marked it ready, and the compute stream waits for the side stream in finish(). The
// times are then the GPU's, read from events once the side stream is done.
//
// A thread rather than non-blocking collectives: every communicator (the composed hierarchical
// and two_dimensional ones too) is a sequence of blocking calls, and MPI's non-blocking
// collectives make progress only while some thread is inside MPI, which during backward none
// would be. MPI is initialised MPI_THREAD_SERIALIZED: while a step is armed only this thread
// calls the communicator; the main thread waits in finish() before it calls it again.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/side_lane.hpp"
#include "dpl/comm/communicator.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::parallel {

class BucketWorker {
 public:
  explicit BucketWorker(comm::Communicator& comm);
  ~BucketWorker();  // stops and joins the thread
  BucketWorker(const BucketWorker&) = delete;
  BucketWorker& operator=(const BucketWorker&) = delete;

  /// One bucket: `data`, a view of the buffer to reduce, holding its elements [begin, end).
  /// With `scatter` (ZeRO stage 2) the bucket is reduce-scattered instead of allreduced, as
  /// BucketScatter describes.
  struct Slice {
    Tensor data;
    std::int64_t begin = 0, end = 0;
    BucketScatter scatter;
  };
  /// Fills a bucket's elements [begin, end) of the buffer before its allreduce, raising the flag
  /// (when not null) on an Inf or NaN: an optimizer's gradient ranges (optim::GradientRanges).
  using Prepare = std::function<void(std::int64_t begin, std::int64_t end, Tensor* flag)>;

  /// Arms one step over `slices` (in bucket order, all on one device), each reduced with kMean in
  /// wire_dtype (a reduce-scatter: in float32). Before a slice's allreduce, `prepare` (when set) fills it and raises `flag`;
  /// else `flag`, when not null, is raised when the slice holds an Inf or NaN. Slices on a GPU
  /// are reduced on that GPU's side lane (created on first use).
  void start(std::vector<Slice> slices, DType wire_dtype, Tensor* flag, Prepare prepare);
  /// Marks bucket k ready (its gradients are final, or on a GPU: queued). Called by the main
  /// thread, which on the host also prepares the bucket (fills and checks it) first.
  void ready(std::size_t k);
  /// Marks every bucket ready, waits until all are reduced (on a GPU: queued, with the compute
  /// stream made to wait for them), and returns their times; rethrows the first error a bucket's
  /// allreduce raised.
  OverlapTimes finish();
  /// Detaches the thread, which may be blocked in a collective that will not complete; the
  /// worker must then never be destroyed (its thread may still read it). Returns this.
  BucketWorker* abandon();

 private:
  void run();

  comm::Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // The armed step (guarded by mutex_).
  std::vector<Slice> slices_;
  Prepare prepare_;
  std::vector<bool> ready_;
  std::vector<OverlapTimes::Interval> times_;
  std::size_t done_ = 0;
  bool armed_ = false;
  bool stop_ = false;
  DType wire_ = DType::kFloat32;
  Tensor* flag_ = nullptr;
  backend::SideLane* lane_ = nullptr;  // the armed step's lane: null for host slices
  std::exception_ptr error_;
  std::unique_ptr<backend::SideLane> side_lane_;  // of the last GPU the slices were on
  std::thread thread_;
};

/// Reduce-scatters one bucket's gradients `data` (kMean) as `scatter` lays it out (BucketScatter):
/// its first size() * recv.numel() elements straight from `data`, the tail through tail_send.
/// Collective over comm. The worker's stage-2 buckets and the stage-1 step after backward both
/// run through it.
void reduce_scatter_bucket(comm::Communicator& comm, const Tensor& data, const BucketScatter& scatter);

}  // namespace dpl::parallel
