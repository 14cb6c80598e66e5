// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major
// (r, c) matrix is the column-major (c, r) matrix, its transpose. So C = op(A) op(B) is computed
// as C^T = op(B)^T op(A)^T, which is a column-major product with the operands swapped and the
// same transpose flags, and no data moves.
//
// float32 goes to cublasSgemm (TF32 only when allowed); bfloat16 and float16 go to cublasGemmEx
// with float32 accumulation (CUBLAS_COMPUTE_32F) and float alpha and beta. Batches of matrices
// (gemm_batched) go to the strided-batched forms of the same calls. A 16-bit linear layer's product
// with its bias (linear_bias) goes to cuBLASLt, which adds the bias in the product's epilogue.
#include <library_types.h>

#include <map>
#include <mutex>
#include <tuple>

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
  // c may be float32 beside 16-bit a and b (an accumulator): cuBLAS takes that pair as it is.
  const cudaDataType_t t = cuda_data_type(a.dtype()), tc = cuda_data_type(c.dtype());
  // beta 0 makes cuBLAS ignore C's old contents (NaN included), as the kernel contract wants.
  if (!batched) {
    if (a.dtype() == kFloat32) {
      DPL_CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, ni, mi, ki, &alpha, b.data<float>(), ldb, a.data<float>(), lda,
                                   &beta, c.data<float>(), ni));
      return;
    }
    DPL_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, ni, mi, ki, &alpha, b.raw_data(), t, ldb, a.raw_data(), t, lda, &beta,
                                  c.raw_data(), tc, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
                                              a.raw_data(), t, lda, sa, &beta, c.raw_data(), tc, ni, sc, count,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// --- the linear layer's product with its bias in the epilogue (cuBLASLt) ---------------------
// out^T (n x m, column-major) = w^T (n x k: w's row-major (n, k) read transposed) x^T (k x m) with
// the bias added to each of out^T's rows in the epilogue. A plan (descriptors and the heuristic's
// algorithm) is made once per device and problem and kept: making one costs more host time than
// the product of a small layer takes on the device.
struct LinearBiasPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, out_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false when cuBLASLt offered no algorithm: the two-pass path then
};

using PlanKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, int>;  // device, m, n, k, dtype

LinearBiasPlan make_linear_bias_plan(CudaDevice& d, std::int64_t m, std::int64_t n, std::int64_t k, DType dtype) {
  LinearBiasPlan p;
  const cudaDataType_t t = cuda_data_type(dtype);
  DPL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)));
  DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.w_layout, t, static_cast<std::uint64_t>(k),
                                              static_cast<std::uint64_t>(n), k));
  DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.x_layout, t, static_cast<std::uint64_t>(k),
                                              static_cast<std::uint64_t>(m), k));
  DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.out_layout, t, static_cast<std::uint64_t>(n),
                                              static_cast<std::uint64_t>(m), n));
  cublasLtMatmulPreference_t pref = nullptr;
  DPL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t workspace = CudaDevice::kCublasWorkspace;
  DPL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                        sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(d.cublas_lt(), p.desc, p.w_layout, p.x_layout,
                                                           p.out_layout, p.out_layout, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.usable = true;
  }
  return p;
}

// Runs the product with the bias epilogue; false (nothing queued) when cuBLASLt has no algorithm.
bool linear_bias_lt(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  static std::mutex mutex;
  static std::map<PlanKey, LinearBiasPlan> plans;
  const std::int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  std::lock_guard<std::mutex> lock(mutex);
  const PlanKey key{d.device(), m, n, k, static_cast<int>(x.dtype())};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_linear_bias_plan(d, m, n, k, x.dtype())).first;
  const LinearBiasPlan& p = it->second;
  if (!p.usable) return false;
  const void* bias_ptr = bias.raw_data();
  DPL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  const float alpha = 1.f, beta = 0.f;
  DPL_CUBLAS_CHECK(cublasLtMatmul(d.cublas_lt(), p.desc, &alpha, w.raw_data(), p.w_layout, x.raw_data(), p.x_layout,
                                  &beta, out.raw_data(), p.out_layout, out.raw_data(), p.out_layout, &p.algo,
                                  d.cublas_workspace(), CudaDevice::kCublasWorkspace, d.stream()));
  return true;
}

void linear_bias_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  DPL_CHECK(x.dim() == 2 && w.dim() == 2 && bias.dim() == 1 && out.dim() == 2 && x.size(1) == w.size(1) &&
                bias.size(0) == w.size(0) && out.size(0) == x.size(0) && out.size(1) == w.size(0),
            "linear_bias: shapes x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", bias ",
            shape_str(bias.shape()), " -> ", shape_str(out.shape()), " do not fit");
  constexpr std::int64_t kIntMax = 2147483647;
  const bool epilogue = x.dtype() != kFloat32 && x.size(0) > 0 && x.size(1) > 0 && w.size(0) > 0 &&
                        x.size(0) <= kIntMax && x.size(1) <= kIntMax && w.size(0) <= kIntMax &&
                        cuda_detail::aligned16(x.raw_data()) && cuda_detail::aligned16(w.raw_data()) &&
                        cuda_detail::aligned16(bias.raw_data()) && cuda_detail::aligned16(out.raw_data());
  if (epilogue && linear_bias_lt(x, w, bias, out)) return;
  gemm_any("linear_bias", false, false, true, 1.f, x, w, 0.f, out);
  binary(BinaryOp::kAdd, Broadcast::kRow, out, bias, 0.f, out);
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
DPL_REGISTER_KERNEL(linear_bias, kCuda, linear_bias_cuda);
DPL_REGISTER_KERNEL(gemm_batched, kCuda, gemm_batched_cuda);

}  // namespace dpl::backend
