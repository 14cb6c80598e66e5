// Matrix products on the CPU through Eigen (no hand-written matrix loops).
#include <Eigen/Core>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// C (m, n) = alpha op(A) op(B) + beta C for row-major A (a_rows, a_cols) and B (b_rows, b_cols).
void gemm_matrices(bool trans_a, bool trans_b, float alpha, const float* a, std::int64_t a_rows, std::int64_t a_cols,
                   const float* b, std::int64_t b_rows, std::int64_t b_cols, float beta, float* c) {
  const ConstMap A(a, a_rows, a_cols);
  const ConstMap B(b, b_rows, b_cols);
  Map C(c, trans_a ? a_cols : a_rows, trans_b ? b_rows : b_cols);
  // Eigen folds the transposes and alpha into one GEMM call; beta 1 accumulates in place.
  auto product = [&](auto&& lhs, auto&& rhs) {
    if (beta == 0.f) {
      C.noalias() = alpha * (lhs * rhs);
    } else {
      if (beta != 1.f) C *= beta;
      C.noalias() += alpha * (lhs * rhs);
    }
  };
  if (!trans_a && !trans_b) product(A, B);
  else if (trans_a && !trans_b) product(A.transpose(), B);
  else if (!trans_a && trans_b) product(A, B.transpose());
  else product(A.transpose(), B.transpose());
}

void gemm_cpu(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
              Tensor& c) {
  gemm_matrices(trans_a, trans_b, alpha, a.data<float>(), a.size(0), a.size(1), b.data<float>(), b.size(0), b.size(1),
                beta, c.data<float>());
}

// One Eigen product per matrix of the batch: each is threaded by Eigen itself where large enough.
void gemm_batched_cpu(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                      Tensor& c) {
  const std::int64_t batch = c.size(0);
  const std::int64_t a_step = a.size(1) * a.size(2), b_step = b.size(1) * b.size(2), c_step = c.size(1) * c.size(2);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  for (std::int64_t i = 0; i < batch; ++i)
    gemm_matrices(trans_a, trans_b, alpha, pa + i * a_step, a.size(1), a.size(2), pb + i * b_step, b.size(1),
                  b.size(2), beta, pc + i * c_step);
}

// The product, then the bias added to every row, in float32: a 16-bit result is rounded once, as
// the GPU's epilogue rounds it.
void linear_bias_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const std::int64_t m = x.size(0), n = w.size(0);
  gemm_matrices(false, true, 1.f, x.data<float>(), m, x.size(1), w.data<float>(), n, w.size(1), 0.f,
                out.data<float>());
  float* po = out.data<float>();
  const float* pb = bias.data<float>();
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c) po[r * n + c] += pb[c];
}

// Both in float32 (16-bit operands are widened and the results rounded once, as on the GPU).
void linear_bias_gelu_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, Tensor& pre) {
  linear_bias_cpu(x, w, bias, pre);
  activation(Activation::kGeluTanh, 0.f, 0.f, pre, out);
}

void gemm_dgelu_bgrad_cpu(const Tensor& gy, const Tensor& w, const Tensor& pre, Tensor& dpre, float beta_bias,
                          Tensor* dbias) {
  const std::int64_t m = gy.size(0), n = w.size(1);
  gemm_matrices(false, false, 1.f, gy.data<float>(), m, gy.size(1), w.data<float>(), w.size(0), n, 0.f,
                dpre.data<float>());
  activation_backward(Activation::kGeluTanh, 0.f, 0.f, pre, dpre, 0.f, dpre);
  if (dbias != nullptr) sum_rows(1.f, dpre, beta_bias, *dbias);
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(linear_bias_gelu, linear_bias_gelu_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(gemm_dgelu_bgrad, gemm_dgelu_bgrad_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(linear_bias, linear_bias_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(gemm, gemm_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(gemm_batched, gemm_batched_cpu);

}  // namespace dpl::backend::cpu
