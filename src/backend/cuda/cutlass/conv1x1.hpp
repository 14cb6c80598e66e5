#pragma once
// 1×1 stride-1 channels-last convolutions on CUTLASS's Hopper product: the forward pass with its
// output's per-channel sums (gemm_column_sums.hpp). Declared only in builds with
// DPL_HAVE_CUTLASS_SM90.

#include "dpl/tensor/tensor.hpp"

#include "backend/kernels.hpp"

namespace dpl::backend::cuda_detail {

/// Whether the product runs on `device`: compute capability 9.0 (sm_90a code runs there only) and
/// DPL_CUTLASS not 0.
bool conv1x1_cutlass_runs_on(int device);

/// y = conv(x, w) and the sums of y and y² per output channel (float32 (O,)), where the problem is
/// a 1×1, stride-1, unpadded, ungrouped convolution of channels-last 16-bit tensors (or float32
/// ones while dpl::cuda::allow_tf32() is on) with channel counts that are multiples of 8 and the
/// device is sm_90. Returns false, having written nothing, for any other problem (the caller then
/// takes another way).
bool conv1x1_forward_sums(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y, Tensor& sum,
                          Tensor& sum_of_squares);

/// For a 1×1, stride-1 convolution whose input y is a batch norm's relu(bn(x) + z): g (y's
/// gradient, holding the contributions gathered so far) = (y > 0) ? g + dL/dy of this convolution
/// : 0, and per channel the sums of g and of g · (x − mean) (float32 (C,)): the batch norm's
/// backward reductions. gy is the convolution's output gradient; y, x and g channels-last in one
/// 16-bit dtype (or float32 while dpl::cuda::allow_tf32() is on, multiplied as TF32) with channel
/// counts that are multiples of 8, mean float32 (C,), on sm_90. Returns
/// false, having written nothing, for any other problem.
bool conv1x1_backward_data_masked_sums(const Tensor& gy, const Tensor& w, const Conv2dParams& p, const Tensor& y,
                                       const Tensor& x, const Tensor& mean, Tensor& g, Tensor& sum_g,
                                       Tensor& sum_gx);

}  // namespace dpl::backend::cuda_detail
