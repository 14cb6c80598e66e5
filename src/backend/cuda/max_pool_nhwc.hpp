#pragma once
// Max pooling of channels-last (NHWC) images on the GPU, our own kernels: the forward pass
// records which element of each window won (one byte per output element), and backward sends
// each output gradient to that element by gathering, one thread per input vector, with no atomics
// and without reading x or y. cuDNN's channels-last backward recomputes the arg-max from x and y;
// in a kernel profile of a float32 ResNet-50 step on the H200 it took about five times what its
// forward pass took for the 3x3 stem pooling.
//
// Internal to the CUDA backend; src/backend/cuda/cudnn/pooling.cpp routes channels-last max
// pooling here.

#include "backend/kernels.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// True when these kernels take max pooling of x with p: x channels-last (packed NHWC strides),
/// a float dtype, and windows of at most 255 elements (a byte holds the winner's index).
bool max_pool_nhwc_fits(const Tensor& x, const Pool2dParams& p);

/// y = max over each window of x (NaN wins: a window holding a NaN gives NaN), and argmax (kUInt8,
/// y's shape and strides) = the winner's index kh * kernel_w + kw within its window (the first
/// of equal maxima in row-major order). y channels-last like x. Requires max_pool_nhwc_fits.
void max_pool_nhwc(const Pool2dParams& p, const Tensor& x, Tensor& y, Tensor& argmax);

/// gx = beta*gx + the gradient of max_pool_nhwc: each output gradient goes to its window's
/// winner. gx channels-last of x's shape, gy in argmax's strides.
void max_pool_nhwc_backward(const Pool2dParams& p, const Tensor& argmax, const Tensor& gy, float beta, Tensor& gx);

}  // namespace dpl::backend::cuda_detail
