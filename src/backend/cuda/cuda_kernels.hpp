#pragma once
// The per-GPU state of the CUDA backend: one CudaDevice per GPU, each with its own non-blocking
// compute stream, a cuBLAS handle bound to that stream, a caching allocator and the scratch of
// the one-launch reductions. Every kernel and copy of the device is queued on that one stream,
// so work is ordered without host synchronisation and freed memory can be reused at once (see
// caching_allocator.hpp). The one exception is the copy stream, where SideStreamCopy
// (backend/side_stream_copy.hpp) moves input batches to the device while the compute stream
// trains; events order it against the compute stream. The kernels themselves are file-local functions of the .cu and .cpp
// files of this folder, registered with the dispatcher (backend/kernels.hpp). Internal header.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "backend/cuda/caching_allocator.hpp"
#include "backend/kernels.hpp"

namespace dpl::backend {

class CudaDevice {
 public:
  /// The state of GPU `device`, created on first use and kept until process exit (tensors in
  /// static objects may free their memory very late). Throws dpl::Error for a device that does
  /// not exist.
  static CudaDevice& get(int device);
  /// The state of `device` when it has been created already, else null. Never throws.
  static CudaDevice* get_if_created(int device) noexcept;

  /// The GPU's index.
  int device() const { return device_; }
  /// The compute stream: every kernel and copy of this device runs on it. Work on other streams
  /// (communication) must be ordered against it with events.
  cudaStream_t stream() const { return stream_; }
  /// The copy stream: host-to-device copies of input batches only (SideStreamCopy), ordered
  /// against stream() by events, so that they overlap the kernels there.
  cudaStream_t copy_stream() const { return copy_stream_; }
  /// The cuBLAS handle of this device, bound to stream() (created on first use).
  cublasHandle_t cublas();
  /// The caching allocator of this device's memory (stream-ordered on stream()).
  cuda_detail::CachingAllocator& allocator() { return *allocator_; }

  /// Scratch of the one-launch reductions (sum_all, the loss, accuracy): per-block partial sums
  /// and a completion counter that the last block resets. Reductions on one stream never overlap,
  /// so one scratch per device suffices.
  struct ReduceScratch {
    double* partials = nullptr;
    unsigned* counter = nullptr;
  };
  /// This device's reduction scratch, for launches on stream().
  const ReduceScratch& scratch() const { return scratch_; }
  /// Most blocks a one-launch reduction may use (size of ReduceScratch::partials).
  static constexpr int kMaxReduceBlocks = 1024;

 private:
  explicit CudaDevice(int device);

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  std::mutex cublas_mutex_;
  std::unique_ptr<cuda_detail::CachingAllocator> allocator_;
  ReduceScratch scratch_;
};

/// The state of the GPU a tensor lives on (the tensor must be on a CUDA device).
inline CudaDevice& cuda_device_of(const Tensor& t) { return CudaDevice::get(t.device().index); }

/// The compute stream of GPU `device` (for communicators that must order their streams
/// against it). Throws dpl::Error for a device that does not exist.
cudaStream_t cuda_stream(int device);

}  // namespace dpl::backend
