#pragma once
// cuDNN on the CUDA backend: one handle per GPU bound to that GPU's compute stream, the error
// check for cuDNN calls, and workspaces from the GPU's caching allocator. Internal: includes
// cudnn.h; compiled only in builds with cuDNN (DPL_WITH_CUDNN).

#include <cudnn.h>

#include <cstddef>

namespace dpl::backend::cuda_detail {

/// Throws dpl::Error for a failed cuDNN call (call text, status name and string, device).
[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t status);

/// The cuDNN handle of GPU `device`, created on first use and bound to the device's compute
/// stream, so every cuDNN call is ordered with dpl's other kernels without host waits. Throws
/// dpl::Error for a device that does not exist or when cuDNN cannot start.
cudnnHandle_t cudnn_handle(int device);

/// Scratch memory for one cuDNN call, from the device's caching allocator. Freed when the holder
/// dies; the allocator is ordered on the compute stream, so the memory is reused only by work
/// queued after the call that used it.
class Workspace {
 public:
  Workspace(int device, std::size_t nbytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  int device_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace dpl::backend::cuda_detail

/// Runs a cuDNN call and throws dpl::Error naming it when it fails.
#define DPL_CUDNN_CHECK(call)                                                                   \
  do {                                                                                          \
    const cudnnStatus_t dpl_cudnn_status_ = (call);                                             \
    if (dpl_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                              \
      ::dpl::backend::cuda_detail::throw_cudnn_error(#call, dpl_cudnn_status_);                 \
  } while (0)
