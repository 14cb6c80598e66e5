#pragma once
// The per-GPU state of the CUDA backend: one CudaDevice per GPU, each with its own non-blocking
// compute stream, a cuBLAS handle bound to that stream, a caching allocator and the scratch of
// the one-launch reductions. Every kernel and copy of the device is queued on that one stream,
// so work is ordered without host synchronisation and freed memory can be reused at once (see
// caching_allocator.hpp). Two exceptions, each ordered against the compute stream by events: the
// copy stream, where SideStreamCopy (backend/side_stream_copy.hpp) moves input batches to the
// device while the compute stream trains, and the side streams of SideLanes
// (backend/side_lane.hpp), where the overlapped allreduce's worker thread queues its buckets.
// The kernels that run on it are file-local functions of the .cu and .cpp files of this folder,
// registered with the dispatcher (backend/kernels.hpp). Internal header.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/caching_allocator.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend {

namespace cuda_detail {
/// Where the calling thread's work for one GPU goes instead of that GPU's compute stream: set by
/// a SideLane (backend/side_lane.hpp) on the thread that queues the overlapped allreduce, for
/// the time it queues one bucket. device -1: no route, everything goes to the compute stream.
struct StreamRoute {
  int device = -1;
  cudaStream_t stream = nullptr;
};
inline thread_local StreamRoute t_stream_route;
}  // namespace cuda_detail

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
  /// The stream the calling thread queues this device's kernels and copies on: the compute
  /// stream, unless a SideLane routes this thread elsewhere for a while (the bucket worker of the
  /// overlapped allreduce). Work on other streams must be ordered against it with events.
  cudaStream_t stream() const {
    return cuda_detail::t_stream_route.device == device_ ? cuda_detail::t_stream_route.stream : stream_;
  }
  /// The compute stream itself, whatever the calling thread's route: for what is bound to it once
  /// (the cuBLAS and cuDNN handles) and for orderings that must hold for every stream.
  cudaStream_t compute_stream() const { return stream_; }
  /// Whether the calling thread's work for this device is routed to a side stream.
  bool routed_here() const { return cuda_detail::t_stream_route.device == device_; }
  /// The side streams of live SideLanes on this device, and their registration: a page-locked
  /// block freed by the host must wait for every stream that may still copy from it.
  std::vector<cudaStream_t> side_streams() const;
  void add_side_stream(cudaStream_t s);
  void remove_side_stream(cudaStream_t s) noexcept;
  /// The copy stream: host-to-device copies of input batches only (SideStreamCopy), ordered
  /// against stream() by events, so that they overlap the kernels there.
  cudaStream_t copy_stream() const { return copy_stream_; }
  /// The cuBLAS handle of this device, bound to stream() (created on first use).
  cublasHandle_t cublas();
  /// The cuBLASLt handle of this device (created on first use). Its calls take the stream and
  /// the workspace per call: stream() and cublas_workspace(), which it shares with the cuBLAS
  /// handle (both queue on the compute stream, so their uses never overlap).
  cublasLtHandle_t cublas_lt();
  void* cublas_workspace();
  /// Bytes of cublas_workspace(): 32 MiB, what NVIDIA recommends for Hopper.
  static constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;
  /// The caching allocator of this device's memory (stream-ordered on stream()).
  cuda_detail::CachingAllocator& allocator() { return *allocator_; }

  /// Scratch of the one-launch reductions (sum_all, the loss, accuracy): per-block partial sums
  /// and a completion counter that the last block resets; and the arrival counters of the
  /// convolutions' one-launch column-sum fold (backend/cuda/cutlass/gemm_column_sums.hpp), which
  /// its last blocks reset. Reductions on one stream never overlap, so one scratch per device
  /// suffices.
  struct ReduceScratch {
    double* partials = nullptr;
    unsigned* counter = nullptr;
    unsigned* fold_counters = nullptr;  // kFoldCounters of them
  };
  /// This device's reduction scratch, for launches on the compute stream (a thread routed to a
  /// side stream may not use it: its reductions would race with the compute stream's).
  const ReduceScratch& scratch() const;
  /// Most blocks a one-launch reduction may use (size of ReduceScratch::partials).
  static constexpr int kMaxReduceBlocks = 1024;
  /// Number of ReduceScratch::fold_counters: folds of up to 32 times as many columns.
  static constexpr int kFoldCounters = 4096;

 private:
  explicit CudaDevice(int device);

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  void* cublas_workspace_ = nullptr;
  std::mutex cublas_mutex_;
  std::unique_ptr<cuda_detail::CachingAllocator> allocator_;
  ReduceScratch scratch_;
  mutable std::mutex side_mutex_;
  std::vector<cudaStream_t> side_streams_;
};

/// The state of the GPU a tensor lives on (the tensor must be on a CUDA device).
inline CudaDevice& cuda_device_of(const Tensor& t) { return CudaDevice::get(t.device().index); }

/// The compute stream of GPU `device` (for communicators that must order their streams
/// against it). Throws dpl::Error for a device that does not exist.
cudaStream_t cuda_stream(int device);

}  // namespace dpl::backend
