// SideLane on the CUDA backend: a non-blocking stream, ordered against the compute stream by
// events (see backend/side_lane.hpp for what the ordering guarantees), with an allocation pool of
// its own in the device's caching allocator.
#include "backend/side_lane.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::DeviceGuard;

cudaStream_t stream_of(void* p) { return static_cast<cudaStream_t>(p); }
cudaEvent_t event_of(void* p) { return static_cast<cudaEvent_t>(p); }

void* timed_event() {
  cudaEvent_t e = nullptr;
  DPL_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

float milliseconds(void* from, void* to) {
  float ms = 0.f;
  DPL_CUDA_CHECK(cudaEventElapsedTime(&ms, event_of(from), event_of(to)));
  return ms;
}
}  // namespace

SideLane::SideLane(int device) {
  CudaDevice& d = CudaDevice::get(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  device_ = device;
  stream_ = s;
  d.add_side_stream(s);
  try {
    backward_end_ = timed_event();
    finished_ = timed_event();
    // Without the cache every free is a cudaFree, which waits for the device: nothing to route.
    if (d.allocator().caching()) pool_ = d.allocator().open_private_pool();
  } catch (...) {
    release();
    throw;
  }
}

SideLane::~SideLane() { release(); }

void SideLane::release() noexcept {
  if (stream_ == nullptr) return;
  CudaDevice* d = CudaDevice::get_if_created(device_);
  if (d == nullptr) return;
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != device_) cudaSetDevice(device_);
  // The pool's blocks and the held ones are ordered on this stream: their work ends first.
  cudaStreamSynchronize(stream_of(stream_));
  if (pool_ != 0) d->allocator().close_private_pool(pool_);
  d->remove_side_stream(stream_of(stream_));
  for (auto* events : {&ready_, &begin_, &end_})
    for (void* e : *events)
      if (e != nullptr) cudaEventDestroy(event_of(e));
  if (backward_end_ != nullptr) cudaEventDestroy(event_of(backward_end_));
  if (finished_ != nullptr) cudaEventDestroy(event_of(finished_));
  cudaStreamDestroy(stream_of(stream_));
  if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  cudaGetLastError();
  ready_.clear();
  begin_.clear();
  end_.clear();
  backward_end_ = finished_ = stream_ = nullptr;
  pool_ = 0;
}

void SideLane::prepare(std::size_t items) {
  DeviceGuard guard(device_);
  // Marks are only waited on; begins and ends are timed.
  while (ready_.size() < items) {
    cudaEvent_t e = nullptr;
    DPL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ready_.push_back(e);
  }
  for (auto* events : {&begin_, &end_})
    while (events->size() < items) events->push_back(timed_event());
  begun_.assign(ready_.size(), 0);
}

void SideLane::mark_ready(std::size_t k) {
  DPL_CHECK(k < ready_.size(), "SideLane::mark_ready: item ", k, " beyond the ", ready_.size(), " prepared");
  CudaDevice& d = CudaDevice::get(device_);
  DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaEventRecord(event_of(ready_[k]), d.compute_stream()));
}

void SideLane::mark_backward_end() {
  CudaDevice& d = CudaDevice::get(device_);
  DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaEventRecord(event_of(backward_end_), d.compute_stream()));
}

SideLane::Scope::Scope(SideLane& lane) : lane_(lane) {
  DPL_CHECK(cuda_detail::t_stream_route.device < 0, "SideLane::Scope: this thread's work is routed to cuda:",
            cuda_detail::t_stream_route.device, "'s side stream already");
  DPL_CUDA_CHECK(cudaGetDevice(&previous_device_));
  if (previous_device_ != lane_.device_) DPL_CUDA_CHECK(cudaSetDevice(lane_.device_));
  try {
    if (lane_.pool_ != 0) CudaDevice::get(lane_.device_).allocator().route_to_pool(lane_.pool_, true);
  } catch (...) {
    if (previous_device_ != lane_.device_) cudaSetDevice(previous_device_);
    throw;
  }
  cuda_detail::t_stream_route = {lane_.device_, stream_of(lane_.stream_)};
}

SideLane::Scope::~Scope() {
  cuda_detail::t_stream_route = {};
  if (lane_.pool_ != 0) CudaDevice::get(lane_.device_).allocator().stop_routing();
  if (previous_device_ >= 0 && previous_device_ != lane_.device_) cudaSetDevice(previous_device_);
}

void SideLane::begin_item(std::size_t k) {
  DPL_CHECK(k < ready_.size(), "SideLane::begin_item: item ", k, " beyond the ", ready_.size(), " prepared");
  const cudaStream_t s = stream_of(stream_);
  DPL_CUDA_CHECK(cudaStreamWaitEvent(s, event_of(ready_[k]), 0));
  DPL_CUDA_CHECK(cudaEventRecord(event_of(begin_[k]), s));
  begun_[k] = 1;
}

void SideLane::end_item(std::size_t k) {
  DPL_CHECK(k < end_.size(), "SideLane::end_item: item ", k, " beyond the ", end_.size(), " prepared");
  DPL_CUDA_CHECK(cudaEventRecord(event_of(end_[k]), stream_of(stream_)));
}

void SideLane::join() {
  CudaDevice& d = CudaDevice::get(device_);
  DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaEventRecord(event_of(finished_), stream_of(stream_)));
  DPL_CUDA_CHECK(cudaStreamWaitEvent(d.compute_stream(), event_of(finished_), 0));
  // Later compute-stream work is ordered after the side stream's: the held blocks may go back.
  if (pool_ != 0) d.allocator().release_held(pool_);
}

SideLane::Times SideLane::times(std::size_t items) {
  DeviceGuard guard(device_);
  // Both ends: the side stream may finish before the compute stream reaches backward's end (the
  // last bucket was ready before backward's last kernels).
  DPL_CUDA_CHECK(cudaEventSynchronize(event_of(finished_)));
  DPL_CUDA_CHECK(cudaEventSynchronize(event_of(backward_end_)));
  Times t;
  t.start.assign(items, 0.0);
  t.seconds.assign(items, 0.0);
  for (std::size_t k = 0; k < items; ++k) {
    if (k >= begun_.size() || begun_[k] == 0) continue;
    t.start[k] = -milliseconds(begin_[k], finished_) * 1e-3;
    t.seconds[k] = milliseconds(begin_[k], end_[k]) * 1e-3;
  }
  t.backward_end = -milliseconds(backward_end_, finished_) * 1e-3;
  return t;
}

}  // namespace dpl::backend
