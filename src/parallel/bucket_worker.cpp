#include "parallel/bucket_worker.hpp"

#include <omp.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "backend/kernels.hpp"
#include "dpl/core/clock.hpp"

namespace dpl::parallel {

BucketWorker::BucketWorker(comm::Communicator& comm) : comm_(comm), thread_([this] { run(); }) {}

BucketWorker::~BucketWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

BucketWorker* BucketWorker::abandon() {
  thread_.detach();
  return this;
}

void BucketWorker::start(std::vector<Slice> slices, DType wire_dtype, Tensor* flag, Prepare prepare) {
  backend::SideLane* lane = nullptr;
  if (!slices.empty() && slices.front().data.device().is_cuda()) {
    const int device = slices.front().data.device().index;
    if (!side_lane_ || side_lane_->device() != device) {
      side_lane_.reset();  // waits for the old GPU's side stream
      side_lane_ = std::make_unique<backend::SideLane>(device);
    }
    lane = side_lane_.get();
    lane->prepare(slices.size());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slices_ = std::move(slices);
    prepare_ = std::move(prepare);
    ready_.assign(slices_.size(), false);
    times_.assign(slices_.size(), {});
    done_ = 0;
    wire_ = wire_dtype;
    flag_ = flag;
    lane_ = lane;
    error_ = nullptr;
    armed_ = true;
  }
  changed_.notify_all();
}

namespace {
// Fills and checks one bucket before its allreduce: the optimizer's range, or the check alone.
void prepare_slice(const BucketWorker::Slice& slice, const BucketWorker::Prepare& prepare, Tensor* flag) {
  if (prepare) prepare(slice.begin, slice.end, flag);
  else if (flag != nullptr) backend::flag_non_finite(slice.data, *flag);
}
}  // namespace

void BucketWorker::ready(std::size_t k) {
  // The main thread alone writes ready_, slices_ and prepare_ (the worker reads them under the
  // lock), so it reads them here without it.
  if (k >= ready_.size() || ready_[k]) return;
  if (lane_ != nullptr) {
    // The mark is where the compute stream stands now, recorded before the worker may see the
    // bucket ready; the worker prepares the bucket on the side stream.
    lane_->mark_ready(k);
  } else {
    // Host memory: the bucket is filled and checked here, by the rank's own threads, so that
    // the worker's one thread goes from one allreduce to the next. The same values either way.
    try {
      prepare_slice(slices_[k], prepare_, flag_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_[k] = true;
  }
  changed_.notify_all();
}

OverlapTimes BucketWorker::finish() {
  OverlapTimes out;
  out.backward_end = now_seconds();
  backend::SideLane* lane = lane_;
  if (lane != nullptr) lane->mark_backward_end();
  // The buckets backward did not complete, in bucket order, each handed over once prepared.
  for (std::size_t k = 0; k < ready_.size(); ++k) ready(k);
  std::unique_lock<std::mutex> lock(mutex_);
  std::fill(ready_.begin(), ready_.end(), true);
  changed_.notify_all();
  changed_.wait(lock, [&] { return done_ == slices_.size(); });
  const double end = now_seconds();
  const std::size_t n = slices_.size();
  armed_ = false;
  slices_.clear();
  prepare_ = nullptr;
  flag_ = nullptr;
  lane_ = nullptr;
  // Whatever was queued, the compute stream goes on only after it.
  if (lane != nullptr) lane->join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  out.exposed = end - out.backward_end;
  if (lane != nullptr) {
    // The GPU's times, anchored to the host clock when the later of the side stream's end and
    // backward's end is seen.
    lock.unlock();
    const backend::SideLane::Times t = lane->times(n);
    const double finished = now_seconds() - std::max(0.0, t.backward_end);
    lock.lock();
    for (std::size_t k = 0; k < n; ++k) {
      times_[k].start = finished + t.start[k];
      times_[k].seconds = t.seconds[k];
    }
    out.backward_end = finished + t.backward_end;
    out.exposed = std::max(0.0, -t.backward_end);
  }
  out.buckets = times_;
  for (const auto& t : times_) {
    out.total += t.seconds;
    out.hidden += std::max(0.0, std::min(t.start + t.seconds, out.backward_end) - t.start);
  }
  return out;
}

void BucketWorker::run() {
  // A new thread starts from OpenMP's initial thread count (every core), not the rank's
  // DPL_NUM_THREADS: the host loops of a bucket's allreduce (sums, the mean's scaling, the
  // non-finite check) would each start a team whose idle threads spin on the cores backward is
  // computing on. This thread is one core's worth of communication; its loops run on it alone.
  // (Giving it the rank's threads once backward is over was measured slower: its team's idle
  // threads then spin on the cores the next step's forward pass computes on.)
  omp_set_num_threads(1);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || (armed_ && done_ < slices_.size() && ready_[done_]); });
    if (stop_) return;
    const std::size_t k = done_;
    Slice slice = slices_[k];
    const Prepare prepare = prepare_;
    Tensor* flag = flag_;
    const DType wire = wire_;
    backend::SideLane* lane = lane_;
    const bool failed = error_ != nullptr;
    lock.unlock();
    // After an error the remaining buckets are only counted off: the step is lost, and the main
    // thread rethrows once finish() sees them all done.
    OverlapTimes::Interval t;
    if (!failed) {
      try {
        std::optional<backend::SideLane::Scope> on_lane;
        if (lane != nullptr) {
          on_lane.emplace(*lane);
          lane->begin_item(k);
        }
        if (lane != nullptr) prepare_slice(slice, prepare, flag);  // on the host, ready() prepared it
        t.start = now_seconds();
        if (slice.scatter.recv.defined()) {
          reduce_scatter_bucket(comm_, slice.data, slice.scatter);
        } else {
          comm_.allreduce(slice.data, comm::ReduceOp::kMean, wire);
        }
        t.seconds = now_seconds() - t.start;
        // last_phases() describes allreduces only.
        if (lane == nullptr && !slice.scatter.recv.defined()) t.phases = comm_.last_phases();
        if (lane != nullptr) lane->end_item(k);
      } catch (...) {
        lock.lock();
        error_ = std::current_exception();
        lock.unlock();
      }
    }
    lock.lock();
    times_[k] = t;
    ++done_;
    changed_.notify_all();
  }
}

// Straight from the gradients, which the ranks cut alike; only the tail travels padded (its
// buffer's zeros past the tail stay zero).
void reduce_scatter_bucket(comm::Communicator& comm, const Tensor& data, const BucketScatter& scatter) {
  const std::int64_t whole = scatter.recv.numel() * comm.size(), n = data.numel();
  if (whole > 0) {
    Tensor recv = scatter.recv;
    comm.reduce_scatter(data.narrow(0, 0, whole), recv, comm::ReduceOp::kMean);
  }
  if (scatter.tail_recv.defined()) {
    Tensor send = scatter.tail_send, recv = scatter.tail_recv;
    send.narrow(0, 0, n - whole).copy_(data.narrow(0, whole, n - whole));
    comm.reduce_scatter(send, recv, comm::ReduceOp::kMean);
  }
}

}  // namespace dpl::parallel
