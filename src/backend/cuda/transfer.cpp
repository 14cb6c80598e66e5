// Copies between devices: host <-> GPU and GPU <-> GPU, each on the compute stream of the GPU
// involved, so they are ordered after the kernels that produced the source.
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda_api.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::DeviceGuard;

void host_to_device(const Tensor& src, Tensor& dst) {
  CudaDevice& k = CudaDevice::get(dst.device().index);
  DeviceGuard guard(k.device());
  // From pageable memory (every host tensor dpl allocates itself) the driver stages the data and
  // returns once the source has been read, so the host tensor may be freed or changed right after.
  // From page-locked memory the copy is truly asynchronous: that is what pinned memory is for.
  // Freeing it is still safe (pinned_free waits for queued copies), but overwriting it before the
  // device is synchronised is not.
  DPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice, k.stream()));
}

void device_to_host(const Tensor& src, Tensor& dst) {
  CudaDevice& k = CudaDevice::get(src.device().index);
  DeviceGuard guard(k.device());
  DPL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, k.stream()));
  // The caller reads the host tensor next.
  DPL_CUDA_CHECK(cudaStreamSynchronize(k.stream()));
}

void device_to_device(const Tensor& src, Tensor& dst) {
  CudaDevice& ks = CudaDevice::get(src.device().index);
  CudaDevice& kd = CudaDevice::get(dst.device().index);
  // The copy runs on the destination's stream after the source's producers (event 1); the
  // source's stream then waits for the copy (event 2), because a block freed there may be reused
  // by its next kernel at once.
  cudaEvent_t produced = nullptr, copied = nullptr;
  {
    DeviceGuard guard(ks.device());
    DPL_CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    DPL_CUDA_CHECK(cudaEventRecord(produced, ks.stream()));
  }
  {
    DeviceGuard guard(kd.device());
    DPL_CUDA_CHECK(cudaStreamWaitEvent(kd.stream(), produced, 0));
    DPL_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), kd.device(), src.raw_data(), ks.device(), src.nbytes(),
                                       kd.stream()));
    DPL_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    DPL_CUDA_CHECK(cudaEventRecord(copied, kd.stream()));
  }
  {
    DeviceGuard guard(ks.device());
    DPL_CUDA_CHECK(cudaStreamWaitEvent(ks.stream(), copied, 0));
    // Destroying a recorded event is fine: its resources go once the work it marks is done.
    cudaEventDestroy(produced);
  }
  {
    DeviceGuard guard(kd.device());
    cudaEventDestroy(copied);
  }
}
}  // namespace

void copy_between_devices(const Tensor& src, Tensor& dst) {
  DPL_CHECK(src.defined() && dst.defined(), "copy_between_devices: both tensors must be defined");
  DPL_CHECK(src.is_contiguous() && dst.is_contiguous(), "copy_between_devices: expected contiguous tensors");
  DPL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy_between_devices: expected equal shapes "
            "and dtypes, got ", shape_str(src.shape()), " ", src.dtype(), " and ", shape_str(dst.shape()), " ",
            dst.dtype());
  if (src.nbytes() == 0) return;
  const Device s = src.device(), d = dst.device();
  if (s.is_cpu() && d.is_cpu()) {
    std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
  } else if (s.is_cpu()) {
    host_to_device(src, dst);
  } else if (d.is_cpu()) {
    device_to_host(src, dst);
  } else if (s.index == d.index) {
    copy_bytes(d, dst.raw_data(), src.raw_data(), src.nbytes());
  } else {
    device_to_device(src, dst);
  }
}

namespace {
void write_values_cuda(Tensor& dst, const std::vector<float>& values) {
  DPL_CHECK(dst.is_contiguous() && dst.numel() == static_cast<std::int64_t>(values.size()),
            "write_values: expected a contiguous destination of ", values.size(), " elements, got ", dst.numel());
  if (values.empty()) return;
  CudaDevice& k = CudaDevice::get(dst.device().index);
  DeviceGuard guard(k.device());
  const std::size_t nbytes = values.size() * sizeof(float);
  // The pinned block goes back to its cache at once: it is reused only after this copy is done.
  void* staging = cuda_api::pinned_allocate(nbytes);
  std::memcpy(staging, values.data(), nbytes);
  const cudaError_t err = cudaMemcpyAsync(dst.raw_data(), staging, nbytes, cudaMemcpyHostToDevice, k.stream());
  cuda_api::pinned_free(staging);
  DPL_CUDA_CHECK(err);
}
// The copy lands in page-locked memory; the event tells when it has.
class DeviceRead final : public PendingRead {
 public:
  DeviceRead(const Tensor& src, CudaDevice& k) : device_(k.device()), n_(static_cast<std::size_t>(src.numel())) {
    DeviceGuard guard(device_);
    host_ = static_cast<float*>(cuda_api::pinned_allocate(n_ * sizeof(float)));
    cudaError_t err = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    if (err == cudaSuccess)
      err = cudaMemcpyAsync(host_, src.raw_data(), n_ * sizeof(float), cudaMemcpyDeviceToHost, k.stream());
    if (err == cudaSuccess) err = cudaEventRecord(done_, k.stream());
    if (err != cudaSuccess) release();
    DPL_CUDA_CHECK(err);
  }
  ~DeviceRead() override { release(); }
  DeviceRead(const DeviceRead&) = delete;
  DeviceRead& operator=(const DeviceRead&) = delete;

  std::vector<float> wait() override {
    DeviceGuard guard(device_);
    DPL_CUDA_CHECK(cudaEventSynchronize(done_));
    return std::vector<float>(host_, host_ + n_);
  }

 private:
  void release() noexcept {
    // pinned_free keeps the block until the queued copy into it is done.
    if (host_ != nullptr) cuda_api::pinned_free(host_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    host_ = nullptr;
    done_ = nullptr;
  }

  int device_;
  std::size_t n_;
  float* host_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

std::shared_ptr<PendingRead> read_back_start_cuda(const Tensor& src) {
  DPL_CHECK(src.is_contiguous(), "read_back_start: expected a contiguous tensor");
  return std::make_shared<DeviceRead>(src, CudaDevice::get(src.device().index));
}
}  // namespace

DPL_REGISTER_KERNEL(read_back_start, kCuda, read_back_start_cuda);
DPL_REGISTER_KERNEL(write_values, kCuda, write_values_cuda);

}  // namespace dpl::backend
