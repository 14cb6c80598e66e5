// gemm_masked_grad_sm90.cuh instantiated for bfloat16: the kernel and its workspace query.
#include "backend/cuda/cutlass/gemm_masked_grad_sm90.cuh"

namespace dpl::backend::cuda_detail::masked_grad_sm90 {

GemmStatus run_bf16(const GemmMaskedGrad& g, cudaStream_t stream) { return run<cutlass::bfloat16_t>(g, stream); }
std::size_t workspace_bf16(const GemmMaskedGrad& g) { return workspace<cutlass::bfloat16_t>(g); }

}  // namespace dpl::backend::cuda_detail::masked_grad_sm90
