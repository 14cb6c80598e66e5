#pragma once
// The CUDA backend: one CudaKernels per GPU, each with its own non-blocking compute stream, a
// cuBLAS handle bound to that stream and a caching allocator. Every kernel and copy of the
// device is queued on that one stream, so work is ordered without host synchronisation and
// freed memory can be reused at once (see caching_allocator.hpp). Internal header.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "backend/cuda/caching_allocator.hpp"
#include "backend/kernels.hpp"

namespace dpl::backend {

class CudaKernels final : public Kernels {
 public:
  /// The backend of GPU `device`, created on first use and kept until process exit (tensors in
  /// static objects may free their memory very late). Throws dpl::Error for a device that does
  /// not exist.
  static CudaKernels& get(int device);
  /// The backend of `device` when it has been created already, else null. Never throws.
  static CudaKernels* get_if_created(int device) noexcept;

  int device() const { return device_; }
  /// The compute stream: every kernel and copy of this device runs on it. Work on other streams
  /// (communication) must be ordered against it with events.
  cudaStream_t stream() const { return stream_; }
  /// The cuBLAS handle of this device, bound to stream() (created on first use).
  cublasHandle_t cublas();
  cuda_detail::CachingAllocator& allocator() { return *allocator_; }

  // Kernels ------------------------------------------------------------------------------------
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* p) override;
  void copy_bytes(void* dst, const void* src, std::size_t nbytes) override;
  void copy_strided(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  void synchronize() override;

  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c) override;
  void binary(BinaryOp op, Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& out) override;
  void axpby(float alpha, const Tensor& x, float beta, Tensor& y) override;
  void sum_rows(float alpha, const Tensor& x, float beta, Tensor& out) override;
  void sum_all(float alpha, const Tensor& x, Tensor& out) override;
  void fill_scaled(float alpha, const Tensor& s, float beta, Tensor& out) override;
  void relu(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& gy, float beta, Tensor& gx) override;
  void softmax_xent(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& loss) override;
  void softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& gloss, float beta,
                             Tensor& glogits) override;
  void accuracy(const Tensor& logits, const Tensor& labels, Tensor& out) override;
  void label_range(const Tensor& labels, std::int64_t& lo, std::int64_t& hi) override;

  void sgd_update(Tensor& param, const Tensor& grad, const SgdHyper& h) override;
  void momentum_update(Tensor& param, const Tensor& grad, Tensor& velocity, const MomentumHyper& h) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h) override;

  /// Scratch of the one-launch reductions (sum_all, the loss, accuracy): per-block partial sums
  /// and a completion counter that the last block resets. Reductions on one stream never overlap,
  /// so one scratch per device suffices.
  struct ReduceScratch {
    double* partials = nullptr;
    unsigned* counter = nullptr;
  };
  /// Most blocks a one-launch reduction may use (size of ReduceScratch::partials).
  static constexpr int kMaxReduceBlocks = 1024;

 private:
  explicit CudaKernels(int device);

  const int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  std::mutex cublas_mutex_;
  std::unique_ptr<cuda_detail::CachingAllocator> allocator_;
  ReduceScratch scratch_;
  // label_range writes its two results straight into mapped pinned host memory.
  std::int32_t* range_host_ = nullptr;
  std::int32_t* range_dev_ = nullptr;
  std::mutex range_mutex_;
};

/// The compute stream of GPU `device` (for communicators that must order their streams
/// against it). Throws dpl::Error for a device that does not exist.
cudaStream_t cuda_stream(int device);

}  // namespace dpl::backend
