// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major
// (r, c) matrix is the column-major (c, r) matrix, its transpose. So C = op(A) op(B) is computed
// as C^T = op(B)^T op(A)^T, which is a column-major product with the operands swapped and the
// same transpose flags, and no data moves.
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

void CudaKernels::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                       Tensor& c) {
  const std::int64_t m = trans_a ? a.size(1) : a.size(0);
  const std::int64_t k = trans_a ? a.size(0) : a.size(1);
  const std::int64_t n = trans_b ? b.size(0) : b.size(1);
  const std::int64_t kb = trans_b ? b.size(1) : b.size(0);
  DPL_CHECK(k == kb && c.size(0) == m && c.size(1) == n, "gemm: shapes ", shape_str(a.shape()),
            trans_a ? "^T" : "", " x ", shape_str(b.shape()), trans_b ? "^T" : "", " -> ", shape_str(c.shape()),
            " do not fit");
  constexpr std::int64_t kIntMax = 2147483647;
  DPL_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax && a.size(1) <= kIntMax && b.size(1) <= kIntMax,
            "gemm: extents above 2^31-1 are not supported, got m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // An empty inner dimension makes the product zero; cuBLAS would leave C untouched.
    if (beta == 0.f) fill(c, 0.0);
    else if (beta != 1.f) axpby(0.f, c, beta, c);
    return;
  }
  cublasHandle_t h = cublas();
  cuda_detail::DeviceGuard guard(device_);
  // beta 0 makes cuBLAS ignore C's old contents (NaN included), as the Kernels contract wants.
  DPL_CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                               b.data<float>(), static_cast<int>(b.size(1)), a.data<float>(),
                               static_cast<int>(a.size(1)), &beta, c.data<float>(), static_cast<int>(n)));
}

}  // namespace dpl::backend
