// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major
// (r, c) matrix is the column-major (c, r) matrix, its transpose. So C = op(A) op(B) is computed
// as C^T = op(B)^T op(A)^T, which is a column-major product with the operands swapped and the
// same transpose flags, and no data moves.
//
// float32 goes to cublasSgemm (TF32 only when allowed); bfloat16 and float16 go to cublasGemmEx
// with float32 accumulation (CUBLAS_COMPUTE_32F) and float alpha and beta. Batches of matrices
// (gemm_batched) go to the strided-batched forms of the same calls.
#include <library_types.h>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {

cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// c = alpha op(a) op(b) + beta c for 2-D operands (`batched` false) or for 3-D ones whose first
// dimension is the batch (`batched` true; one strided-batched call). `name` is the kernel's.
void gemm_any(const char* name, bool batched, bool trans_a, bool trans_b, float alpha, const Tensor& a,
              const Tensor& b, float beta, Tensor& c) {
  const int r = batched ? 1 : 0;  // the first matrix dimension
  const std::int64_t batch = batched ? c.size(0) : 1;
  const std::int64_t m = trans_a ? a.size(r + 1) : a.size(r);
  const std::int64_t k = trans_a ? a.size(r) : a.size(r + 1);
  const std::int64_t n = trans_b ? b.size(r) : b.size(r + 1);
  const std::int64_t kb = trans_b ? b.size(r + 1) : b.size(r);
  DPL_CHECK(a.dim() == r + 2 && b.dim() == r + 2 && c.dim() == r + 2 && k == kb && c.size(r) == m &&
                c.size(r + 1) == n && (!batched || (a.size(0) == batch && b.size(0) == batch)),
            name, ": shapes ", shape_str(a.shape()), trans_a ? "^T" : "", " x ", shape_str(b.shape()),
            trans_b ? "^T" : "", " -> ", shape_str(c.shape()), " do not fit");
  constexpr std::int64_t kIntMax = 2147483647;
  DPL_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax && batch <= kIntMax && a.size(r + 1) <= kIntMax &&
                b.size(r + 1) <= kIntMax,
            name, ": extents above 2^31-1 are not supported, got batch=", batch, " m=", m, " n=", n, " k=", k);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    // An empty inner dimension makes the product zero; cuBLAS would leave C untouched.
    if (beta == 0.f) fill(c, 0.0);
    else if (beta != 1.f) axpby(0.f, c, beta, c);
    return;
  }
  CudaDevice& d = cuda_device_of(a);
  cublasHandle_t h = d.cublas();
  cuda_detail::DeviceGuard guard(d.device());
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const auto lda = static_cast<int>(a.size(r + 1)), ldb = static_cast<int>(b.size(r + 1));
  const cudaDataType_t t = cuda_data_type(a.dtype());
  // beta 0 makes cuBLAS ignore C's old contents (NaN included), as the kernel contract wants.
  if (!batched) {
    if (a.dtype() == kFloat32) {
      DPL_CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, ni, mi, ki, &alpha, b.data<float>(), ldb, a.data<float>(), lda,
                                   &beta, c.data<float>(), ni));
      return;
    }
    DPL_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, ni, mi, ki, &alpha, b.raw_data(), t, ldb, a.raw_data(), t, lda, &beta,
                                  c.raw_data(), t, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  const long long sa = a.size(1) * a.size(2), sb = b.size(1) * b.size(2), sc = m * n;
  const auto count = static_cast<int>(batch);
  if (a.dtype() == kFloat32) {
    DPL_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, ni, mi, ki, &alpha, b.data<float>(), ldb, sb,
                                               a.data<float>(), lda, sa, &beta, c.data<float>(), ni, sc, count));
    return;
  }
  DPL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, ni, mi, ki, &alpha, b.raw_data(), t, ldb, sb,
                                              a.raw_data(), t, lda, sa, &beta, c.raw_data(), t, ni, sc, count,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_cuda(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  gemm_any("gemm", false, trans_a, trans_b, alpha, a, b, beta, c);
}

void gemm_batched_cuda(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                       Tensor& c) {
  gemm_any("gemm_batched", true, trans_a, trans_b, alpha, a, b, beta, c);
}

}  // namespace

DPL_REGISTER_KERNEL(gemm, kCuda, gemm_cuda);
DPL_REGISTER_KERNEL(gemm_batched, kCuda, gemm_batched_cuda);

}  // namespace dpl::backend
