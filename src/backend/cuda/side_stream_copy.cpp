// SideStreamCopy on the CUDA backend: copies on the device's copy stream, ordered against its
// compute stream by events (see backend/side_stream_copy.hpp for what the ordering guarantees).
#include "backend/side_stream_copy.hpp"

#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::DeviceGuard;

cudaEvent_t event_of(void* p) { return static_cast<cudaEvent_t>(p); }
}  // namespace

SideStreamCopy::SideStreamCopy(Device device) {
  DPL_CHECK(device.is_cuda(), "SideStreamCopy: expected a GPU to copy to, got ", device);
  CudaDevice& d = CudaDevice::get(device.index);
  DeviceGuard guard(d.device());
  cudaEvent_t queued = nullptr, done = nullptr;
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
  // The copies may write memory whose previous owner's kernels are still queued on the compute
  // stream (the caching allocator reuses blocks in that stream's order): they wait for them.
  const cudaError_t recorded = cudaEventRecord(queued, d.stream());
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(d.copy_stream(), queued, 0) : recorded;
  cudaEventDestroy(queued);  // released once the work it marks is done
  DPL_CUDA_CHECK(waited);
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t marked = cudaEventRecord(done, d.copy_stream());  // so that wait() holds with no copy yet
  if (marked != cudaSuccess) {
    cudaEventDestroy(done);
    DPL_CUDA_CHECK(marked);
  }
  device_ = device.index;
  done_ = done;
}

SideStreamCopy::~SideStreamCopy() { reset(); }

SideStreamCopy::SideStreamCopy(SideStreamCopy&& other) noexcept
    : device_(std::exchange(other.device_, -1)), done_(std::exchange(other.done_, nullptr)) {}

SideStreamCopy& SideStreamCopy::operator=(SideStreamCopy&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = std::exchange(other.device_, -1);
    done_ = std::exchange(other.done_, nullptr);
  }
  return *this;
}

void SideStreamCopy::reset() noexcept {
  if (done_ == nullptr) return;
  if (CudaDevice* d = CudaDevice::get_if_created(device_)) {
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    // A destination freed after this is reused by compute-stream work only after the copies.
    if (cudaStreamWaitEvent(d->stream(), event_of(done_), 0) != cudaSuccess) cudaGetLastError();
    cudaEventDestroy(event_of(done_));
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  }
  device_ = -1;
  done_ = nullptr;
}

void SideStreamCopy::copy(const Tensor& src, Tensor& dst) {
  const char* op = "SideStreamCopy::copy";
  DPL_CHECK(active(), op, ": the copy group was not started on a GPU");
  DPL_CHECK(src.defined() && dst.defined(), op, ": expected defined tensors");
  DPL_CHECK(src.device().is_cpu(), op, ": expected a host source, got a tensor on ", src.device());
  DPL_CHECK(dst.device() == Device::cuda(device_), op, ": expected a destination on cuda:", device_, ", got ",
            dst.device());
  DPL_CHECK(src.is_contiguous() && dst.is_contiguous(), op, ": expected contiguous tensors");
  DPL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), op, ": expected equal shapes and dtypes, got ",
            shape_str(src.shape()), " ", src.dtype(), " and ", shape_str(dst.shape()), " ", dst.dtype());
  if (src.nbytes() == 0) return;
  CudaDevice& d = CudaDevice::get(device_);
  DeviceGuard guard(d.device());
  DPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice,
                                 d.copy_stream()));
  DPL_CUDA_CHECK(cudaEventRecord(event_of(done_), d.copy_stream()));
}

void SideStreamCopy::order_compute_after() const {
  if (!active()) return;
  CudaDevice& d = CudaDevice::get(device_);
  DeviceGuard guard(d.device());
  DPL_CUDA_CHECK(cudaStreamWaitEvent(d.stream(), event_of(done_), 0));
}

void SideStreamCopy::wait() const {
  if (!active()) return;
  DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaEventSynchronize(event_of(done_)));
}

}  // namespace dpl::backend
