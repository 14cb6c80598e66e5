#pragma once
// The data gradient of a 1×1 convolution completed, masked and reduced for the batch norm before
// it, in one product (gemm_masked_grad_sm90.cu), as the rest of the CUDA backend sees it: plain
// pointers and sizes, no CUTLASS header. Built only with DPL_HAVE_CUTLASS_SM90.
//
// Where it fits: a residual block's output y = relu(bn(x) + shortcut) feeds the next block's first
// 1×1 convolution and its identity path. Backward, the gradient of y gathers the identity path's
// contribution and then this convolution's data gradient; the batch norm then masks it by y > 0
// and sums it and its product with x − mean per channel. Done in the data gradient's epilogue,
// the unmasked gradient is never written and read back.

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/cutlass/gemm_column_sums.hpp"
#include "backend/cuda/cutlass/gemm_status.hpp"

namespace dpl::backend::cuda_detail {

/// g (rows × c, row-major) = (y > 0) ? g + gy · w : 0, for gy (rows × o) and w (o × c) row-major,
/// g holding the gradient gathered so far (read and overwritten), y and x (rows × c) the batch
/// norm's output and input; all bfloat16, all float16 or all float32 (multiplied as TF32, whose
/// operands must be K-major: then w holds wᵀ, c × o row-major), float accumulation, the result
/// rounded once. Per 128-row tile the epilogue writes the sums of each channel of g (as rounded) and of
/// g · (x − mean[channel]) into partials.a and partials.b (ColumnPartials for rows × c), folded
/// into the sums. o and c multiples of 8, pointers 16-byte aligned.
struct GemmMaskedGrad {
  GemmElement element = GemmElement::kBFloat16;
  int device = 0;
  int multiprocessors = 0;
  int rows = 0, o = 0, c = 0;
  const void* gy = nullptr;
  const void* w = nullptr;  // o × c row-major; float32: c × o row-major (wᵀ)
  void* g = nullptr;
  const void* y = nullptr;
  const void* x = nullptr;
  const float* mean = nullptr;
  ColumnPartials partials;  // a: the sums of g, b: of g · (x − mean)
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

/// Scratch the product asks for beyond the partials.
std::size_t gemm_masked_grad_workspace(const GemmMaskedGrad& g);

/// Runs the product, then adds the partials in a fixed order into sum_g and sum_gx (c floats each).
GemmStatus gemm_masked_grad(const GemmMaskedGrad& g, float* sum_g, float* sum_gx, cudaStream_t stream);

}  // namespace dpl::backend::cuda_detail
