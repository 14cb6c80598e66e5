#pragma once
// The kernel interface every backend implements. Ops and optimizers call kernels_for(device)
// and never a backend directly, so adding a device means implementing this class once.
//
// Conventions for every kernel:
//  - tensors are contiguous, float32 unless stated, and on the backend's device (the dispatcher
//    checks; kernels may assume);
//  - `beta` is 0 or 1: the kernel writes (beta 0, the old contents are ignored, even NaN) or adds
//    to (beta 1) its output. Backward kernels take it so that gradient accumulation costs no
//    extra pass over memory;
//  - kernels run asynchronously on the device's compute stream where the device has one.

#include <cstdint>

#include "dpl/tensor/tensor.hpp"

namespace dpl::backend {

/// How the second operand of a binary elementwise op is broadcast.
enum class Broadcast { kNone, kRow, kScalar };  // same shape | b has shape (C,) of a (N,C) | b has 1 element

enum class BinaryOp { kAdd, kSub, kMul };

struct SgdHyper {
  float lr;
  float weight_decay;
};
struct MomentumHyper {
  float lr;
  float momentum;
  float weight_decay;
};
struct AdamHyper {
  float lr_t;   // alpha * sqrt(1 - beta2^t) / (1 - beta1^t)
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // memory -----------------------------------------------------------------------------------
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void deallocate(void* p) = 0;
  /// Copies nbytes between two buffers on this backend's device.
  virtual void copy_bytes(void* dst, const void* src, std::size_t nbytes) = 0;
  /// dst = src for any strides (same shape and dtype).
  virtual void copy_strided(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, double value) = 0;
  /// Waits until all queued work of this backend's device is done.
  virtual void synchronize() = 0;

  // math -------------------------------------------------------------------------------------
  /// C = alpha * op(A) op(B) + beta * C for row-major 2-D matrices.
  virtual void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                    Tensor& c) = 0;
  /// out = beta*out + (a op b) with b broadcast as stated.
  virtual void binary(BinaryOp op, Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& out) = 0;
  /// y = beta*y + alpha*x (same shape).
  virtual void axpby(float alpha, const Tensor& x, float beta, Tensor& y) = 0;
  /// out (C,) = beta*out + alpha * sum over rows of x (N,C).
  virtual void sum_rows(float alpha, const Tensor& x, float beta, Tensor& out) = 0;
  /// out (1 element) = alpha * sum of all elements of x.
  virtual void sum_all(float alpha, const Tensor& x, Tensor& out) = 0;
  /// out = beta*out + alpha * s[0] for every element (s is a one-element tensor).
  virtual void fill_scaled(float alpha, const Tensor& s, float beta, Tensor& out) = 0;
  /// y = max(x, 0).
  virtual void relu(const Tensor& x, Tensor& y) = 0;
  /// gx = beta*gx + gy * (y > 0).
  virtual void relu_backward(const Tensor& y, const Tensor& gy, float beta, Tensor& gx) = 0;
  /// probs = softmax(logits) row-wise; loss (1 element) = mean over rows of -log probs[label].
  /// Labels are int32 in [0, C); the caller has checked them.
  virtual void softmax_xent(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& loss) = 0;
  /// glogits = beta*glogits + gloss[0] / N * (probs - onehot(labels)).
  virtual void softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& gloss, float beta,
                                     Tensor& glogits) = 0;
  /// out (1 element) = fraction of rows whose arg-max equals the label.
  virtual void accuracy(const Tensor& logits, const Tensor& labels, Tensor& out) = 0;
  /// Largest label value and smallest label value of an int32 tensor, read back to the host.
  virtual void label_range(const Tensor& labels, std::int64_t& lo, std::int64_t& hi) = 0;

  // optimizers: one fused pass over a whole arena ----------------------------------------------
  virtual void sgd_update(Tensor& param, const Tensor& grad, const SgdHyper& h) = 0;
  virtual void momentum_update(Tensor& param, const Tensor& grad, Tensor& velocity, const MomentumHyper& h) = 0;
  virtual void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h) = 0;
};

/// The kernels of device's backend. Throws dpl::Error for a CUDA device in a build without CUDA.
Kernels& kernels_for(Device device);

/// The CPU backend (always present).
Kernels& cpu_kernels();
/// The CUDA backend for GPU `index`; defined only in CUDA builds (src/backend/cuda), and in
/// builds without CUDA by stand-ins that throw a clear error (src/backend/no_cuda).
Kernels& cuda_kernels(int index);

}  // namespace dpl::backend

namespace dpl::backend {
/// Copies a contiguous tensor to a contiguous tensor of the same shape and dtype on another
/// device (host <-> GPU, GPU <-> GPU). Defined by the CUDA backend; throws without it.
void copy_between_devices(const Tensor& src, Tensor& dst);
}  // namespace dpl::backend
