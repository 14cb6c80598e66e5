#pragma once
// The bias of the GPU's 2-D convolution: two small kernels of our own (its add and its gradient),
// which cuDNN's bias calls do not cover for bfloat16. Internal header.

#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// y[n, c, h, w] += bias[c] on y's device and compute stream, for a float y of shape (N, C, H, W)
/// stored NCHW (nhwc false) or channels-last (nhwc true) and a bias (C) of y's dtype.
void add_conv_bias(const Tensor& bias, Tensor& y, bool nhwc);

}  // namespace dpl::backend::cuda_detail
