// gemm_masked_grad_sm90.cuh instantiated for float32 (multiplied as TF32): the kernel and its workspace query.
#include "backend/cuda/cutlass/gemm_masked_grad_sm90.cuh"

namespace dpl::backend::cuda_detail::masked_grad_sm90 {

GemmStatus run_f32(const GemmMaskedGrad& g, cudaStream_t stream) { return run<float>(g, stream); }
std::size_t workspace_f32(const GemmMaskedGrad& g) { return workspace<float>(g); }

}  // namespace dpl::backend::cuda_detail::masked_grad_sm90
