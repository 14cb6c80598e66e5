#include "backend/cuda/cudnn/cudnn_runtime.hpp"

#include <array>
#include <mutex>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::cuda_detail {

namespace {
constexpr int kMaxHandles = 64;  // as many GPUs as the backend's device registry holds
std::array<cudnnHandle_t, kMaxHandles> g_handles{};
std::mutex g_handles_mutex;
}  // namespace

void throw_cudnn_error(const char* call, cudnnStatus_t status) {
  int device = -1;
  cudaGetDevice(&device);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  DPL_FAIL("cuDNN call ", call, " failed on cuda:", device, ": ", cudnnGetErrorString(status),
           (detail[0] != '\0' ? " (" : ""), detail, (detail[0] != '\0' ? ")" : ""));
}

cudnnHandle_t cudnn_handle(int device) {
  CudaDevice& d = CudaDevice::get(device);  // checks the device
  DPL_CHECK(!d.routed_here(), "cuda:", device, ": cuDNN work is bound to the compute stream and cannot be queued ",
            "from a thread whose work is routed to a side stream (the overlapped allreduce's)");
  DPL_CHECK(device < kMaxHandles, "cudnn_handle: cuda:", device, " is beyond the ", kMaxHandles,
            " GPUs dpl supports");
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  cudnnHandle_t& h = g_handles[static_cast<std::size_t>(device)];
  if (h == nullptr) {
    DeviceGuard guard(device);
    DPL_CUDNN_CHECK(cudnnCreate(&h));
    DPL_CUDNN_CHECK(cudnnSetStream(h, d.compute_stream()));
  }
  return h;
}

Workspace::Workspace(int device, std::size_t nbytes) : device_(device), size_(nbytes) {
  if (nbytes > 0) data_ = CudaDevice::get(device).allocator().allocate(nbytes);
}

Workspace::~Workspace() {
  if (data_ != nullptr) CudaDevice::get(device_).allocator().deallocate(data_);
}

}  // namespace dpl::backend::cuda_detail
