// Matrix products on the CPU through Eigen (no hand-written matrix loops).
#include <Eigen/Core>

#include "backend/cpu/cpu.hpp"

namespace dpl::backend::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

void gemm_cpu(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
              Tensor& c) {
  const ConstMap A(a.data<float>(), a.size(0), a.size(1));
  const ConstMap B(b.data<float>(), b.size(0), b.size(1));
  Map C(c.data<float>(), c.size(0), c.size(1));
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

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(gemm, gemm_cpu);

}  // namespace dpl::backend::cpu
