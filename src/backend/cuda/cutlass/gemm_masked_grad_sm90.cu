// gemm_masked_grad.hpp: picks the dtype's instantiation (gemm_masked_grad_{bf16,f16,f32}_sm90.cu), then
// folds the per-tile partials into the sums (gemm_column_sums.hpp's fold).
#include "backend/cuda/cutlass/gemm_masked_grad.hpp"

namespace dpl::backend::cuda_detail {
namespace masked_grad_sm90 {

GemmStatus run_bf16(const GemmMaskedGrad& g, cudaStream_t stream);
GemmStatus run_f16(const GemmMaskedGrad& g, cudaStream_t stream);
GemmStatus run_f32(const GemmMaskedGrad& g, cudaStream_t stream);
std::size_t workspace_bf16(const GemmMaskedGrad& g);
std::size_t workspace_f16(const GemmMaskedGrad& g);
std::size_t workspace_f32(const GemmMaskedGrad& g);

}  // namespace masked_grad_sm90

std::size_t gemm_masked_grad_workspace(const GemmMaskedGrad& g) {
  switch (g.element) {
    case GemmElement::kBFloat16: return masked_grad_sm90::workspace_bf16(g);
    case GemmElement::kFloat16: return masked_grad_sm90::workspace_f16(g);
    case GemmElement::kFloat32: return masked_grad_sm90::workspace_f32(g);
  }
  return 0;
}

GemmStatus gemm_masked_grad(const GemmMaskedGrad& g, float* sum_g, float* sum_gx, cudaStream_t stream) {
  const GemmStatus s = g.element == GemmElement::kBFloat16 ? masked_grad_sm90::run_bf16(g, stream)
                       : g.element == GemmElement::kFloat16 ? masked_grad_sm90::run_f16(g, stream)
                                                             : masked_grad_sm90::run_f32(g, stream);
  if (s != GemmStatus::kDone) return s;
  return fold_column_partials(g.partials, g.rows, g.c, sum_g, sum_gx, stream);
}

}  // namespace dpl::backend::cuda_detail
