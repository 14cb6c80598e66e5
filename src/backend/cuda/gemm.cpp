// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major
// (r, c) matrix is the column-major (c, r) matrix, its transpose. So C = op(A) op(B) is computed
// as C^T = op(B)^T op(A)^T, which is a column-major product with the operands swapped and the
// same transpose flags, and no data moves.
//
// float32 goes to cublasSgemm (TF32 only when allowed); bfloat16 and float16 go to cublasGemmEx
// with float32 accumulation (CUBLAS_COMPUTE_32F) and float alpha and beta. Batches of matrices
// (gemm_batched) go to the strided-batched forms of the same calls. A 16-bit linear layer's product
// with its bias (linear_bias, and with GELU after it, linear_bias_gelu) and the product that gives
// that GELU's input gradient (gemm_dgelu_bgrad) go to cuBLASLt, which does the rest in the
// product's epilogue.
#include <library_types.h>

#include <map>
#include <initializer_list>
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

// --- products with an epilogue (cuBLASLt) ----------------------------------------------------
// A linear layer's forward, out^T (n x m, column-major) = w^T (n x k: w's row-major (n, k) read
// transposed) x^T (k x m), with the bias added to each of out^T's rows in the epilogue, and with
// GELU applied after it (the pre-activation stored as the auxiliary output). The activation's
// backward, dpre^T (n x m) = w'^T (n x k: the row-major (k, n) w read as is) gy^T (k x m), with
// GELU's derivative at the stored pre-activation applied in the epilogue; the bias gradient, dpre's
// sums over the m rows, is a separate reduction. cuBLASLt's DGELU_BGRAD epilogue would write it
// too, but on sm_90 it runs as a product followed by a separate epilogue kernel that took 2.8x
// the product's time for GPT-2's MLP (347 us against 122 us, 16384 x 3072 bf16), where DGELU alone
// stays in the product's kernel and the reduction reads dpre once. A plan (descriptors and the heuristic's
// algorithm) is made once per device, epilogue and problem and kept: making one costs more host
// time than the product of a small layer takes on the device.
enum class LtEpilogue { kBias, kGeluAuxBias, kDGelu };

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false when cuBLASLt offered no algorithm: the caller's unfused path then
};

using PlanKey = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, int>;  // device, epilogue, m, n, k, dtype

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::kDGelu: break;
  }
  return CUBLASLT_EPILOGUE_DGELU;
}

LtPlan make_lt_plan(CudaDevice& d, LtEpilogue e, std::int64_t m, std::int64_t n, std::int64_t k, DType dtype) {
  LtPlan p;
  const cudaDataType_t t = cuda_data_type(dtype);
  const bool forward = e == LtEpilogue::kBias || e == LtEpilogue::kGeluAuxBias;
  DPL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = forward ? CUBLAS_OP_T : CUBLAS_OP_N, no_trans = CUBLAS_OP_N;
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  const cublasLtEpilogue_t epilogue = lt_epilogue(e);
  DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (e != LtEpilogue::kDGelu)
    DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)));
  if (e != LtEpilogue::kBias) {
    const std::int64_t aux_ld = n;  // the pre-activation is laid out as the output
    DPL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // A: w, (k x n) ld k read transposed forward, (n x k) ld n as is backward; B: x or gy, (k x m).
  if (forward)
    DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a_layout, t, static_cast<std::uint64_t>(k),
                                                static_cast<std::uint64_t>(n), k));
  else
    DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a_layout, t, static_cast<std::uint64_t>(n),
                                                static_cast<std::uint64_t>(k), n));
  DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b_layout, t, static_cast<std::uint64_t>(k),
                                              static_cast<std::uint64_t>(m), k));
  DPL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d_layout, t, static_cast<std::uint64_t>(n),
                                              static_cast<std::uint64_t>(m), n));
  cublasLtMatmulPreference_t pref = nullptr;
  DPL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t workspace = CudaDevice::kCublasWorkspace;
  DPL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                        sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(d.cublas_lt(), p.desc, p.a_layout, p.b_layout,
                                                           p.d_layout, p.d_layout, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.usable = true;
  }
  return p;
}

// One product with epilogue e: a (w) and b (x or gy) as the plan lays them out, the output d, the
// bias (or the bias gradient) and the auxiliary pre-activation where e takes them. False (nothing
// queued) when cuBLASLt has no algorithm for the problem.
bool lt_matmul(LtEpilogue e, std::int64_t m, std::int64_t n, std::int64_t k, const Tensor& a, const Tensor& b,
               Tensor& out, const void* bias, const void* aux) {
  static std::mutex mutex;
  static std::map<PlanKey, LtPlan> plans;
  CudaDevice& d = cuda_device_of(a);
  cuda_detail::DeviceGuard guard(d.device());
  std::lock_guard<std::mutex> lock(mutex);
  const PlanKey key{d.device(), static_cast<int>(e), m, n, k, static_cast<int>(a.dtype())};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_lt_plan(d, e, m, n, k, a.dtype())).first;
  const LtPlan& p = it->second;
  if (!p.usable) return false;
  if (bias != nullptr)
    DPL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux != nullptr)
    DPL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float alpha = 1.f, beta = 0.f;
  DPL_CUBLAS_CHECK(cublasLtMatmul(d.cublas_lt(), p.desc, &alpha, a.raw_data(), p.a_layout, b.raw_data(), p.b_layout,
                                  &beta, out.raw_data(), p.d_layout, out.raw_data(), p.d_layout, &p.algo,
                                  d.cublas_workspace(), CudaDevice::kCublasWorkspace, d.stream()));
  return true;
}

// Whether cuBLASLt's epilogues may take these operands: 16-bit, extents that fit an int and are
// not empty, 16-byte aligned pointers (and, for an auxiliary matrix of n columns, n a multiple of
// 8, which keeps each of its rows aligned).
constexpr std::int64_t kIntMax = 2147483647;
bool lt_offered(std::int64_t m, std::int64_t n, std::int64_t k, bool aux, std::initializer_list<const Tensor*> ts) {
  if (m <= 0 || n <= 0 || k <= 0 || m > kIntMax || n > kIntMax || k > kIntMax || (aux && n % 8 != 0)) return false;
  for (const Tensor* t : ts)
    if (t != nullptr && (t->dtype() == kFloat32 || !cuda_detail::aligned16(t->raw_data()))) return false;
  return true;
}

void linear_bias_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  DPL_CHECK(x.dim() == 2 && w.dim() == 2 && bias.dim() == 1 && out.dim() == 2 && x.size(1) == w.size(1) &&
                bias.size(0) == w.size(0) && out.size(0) == x.size(0) && out.size(1) == w.size(0),
            "linear_bias: shapes x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", bias ",
            shape_str(bias.shape()), " -> ", shape_str(out.shape()), " do not fit");
  const std::int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (lt_offered(m, n, k, false, {&x, &w, &bias, &out}) &&
      lt_matmul(LtEpilogue::kBias, m, n, k, w, x, out, bias.raw_data(), nullptr))
    return;
  gemm_any("linear_bias", false, false, true, 1.f, x, w, 0.f, out);
  binary(BinaryOp::kAdd, Broadcast::kRow, out, bias, 0.f, out);
}

void linear_bias_gelu_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, Tensor& pre) {
  DPL_CHECK(x.dim() == 2 && w.dim() == 2 && bias.dim() == 1 && x.size(1) == w.size(1) && bias.size(0) == w.size(0) &&
                out.shape() == Shape({x.size(0), w.size(0)}) && pre.shape() == out.shape(),
            "linear_bias_gelu: shapes x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", bias ",
            shape_str(bias.shape()), " -> ", shape_str(out.shape()), " and ", shape_str(pre.shape()), " do not fit");
  const std::int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (lt_offered(m, n, k, true, {&x, &w, &bias, &out, &pre}) &&
      lt_matmul(LtEpilogue::kGeluAuxBias, m, n, k, w, x, out, bias.raw_data(), pre.raw_data()))
    return;
  linear_bias_cuda(x, w, bias, pre);
  activation(Activation::kGeluTanh, 0.f, 0.f, pre, out);
}

void gemm_dgelu_bgrad_cuda(const Tensor& gy, const Tensor& w, const Tensor& pre, Tensor& dpre, float beta_bias,
                           Tensor* dbias) {
  DPL_CHECK(gy.dim() == 2 && w.dim() == 2 && gy.size(1) == w.size(0) &&
                pre.shape() == Shape({gy.size(0), w.size(1)}) && dpre.shape() == pre.shape() &&
                (dbias == nullptr || dbias->shape() == Shape({w.size(1)})),
            "gemm_dgelu_bgrad: shapes gy ", shape_str(gy.shape()), ", w ", shape_str(w.shape()), ", pre ",
            shape_str(pre.shape()), " -> ", shape_str(dpre.shape()), " do not fit");
  const std::int64_t m = gy.size(0), k = gy.size(1), n = w.size(1);
  if (!(lt_offered(m, n, k, true, {&gy, &w, &pre, &dpre}) &&
        lt_matmul(LtEpilogue::kDGelu, m, n, k, w, gy, dpre, nullptr, pre.raw_data()))) {
    gemm_any("gemm_dgelu_bgrad", false, false, false, 1.f, gy, w, 0.f, dpre);
    activation_backward(Activation::kGeluTanh, 0.f, 0.f, pre, dpre, 0.f, dpre);
  }
  if (dbias != nullptr) sum_rows(1.f, dpre, beta_bias, *dbias);
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
DPL_REGISTER_KERNEL(linear_bias_gelu, kCuda, linear_bias_gelu_cuda);
DPL_REGISTER_KERNEL(gemm_dgelu_bgrad, kCuda, gemm_dgelu_bgrad_cuda);
DPL_REGISTER_KERNEL(gemm_batched, kCuda, gemm_batched_cuda);

}  // namespace dpl::backend
