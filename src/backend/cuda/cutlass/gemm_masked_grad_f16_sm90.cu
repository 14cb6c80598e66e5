// gemm_masked_grad_sm90.cuh instantiated for float16: the kernel and its workspace query.
#include "backend/cuda/cutlass/gemm_masked_grad_sm90.cuh"

namespace dpl::backend::cuda_detail::masked_grad_sm90 {

GemmStatus run_f16(const GemmMaskedGrad& g, cudaStream_t stream) { return run<cutlass::half_t>(g, stream); }
std::size_t workspace_f16(const GemmMaskedGrad& g) { return workspace<cutlass::half_t>(g); }

}  // namespace dpl::backend::cuda_detail::masked_grad_sm90
