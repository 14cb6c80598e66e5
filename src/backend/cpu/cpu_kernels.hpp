#pragma once
// The CPU backend: Eigen for matrix products, OpenMP loops for elementwise work.

#include "backend/kernels.hpp"

namespace dpl::backend {

class CpuKernels final : public Kernels {
 public:
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* p) override;
  void copy_bytes(void* dst, const void* src, std::size_t nbytes) override;
  void copy_strided(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, double value) override;
  void synchronize() override {}

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
};

/// Below this many elements a loop runs on one thread: waking the pool costs more than it saves.
inline constexpr std::int64_t kParallelGrain = 1 << 15;

}  // namespace dpl::backend
