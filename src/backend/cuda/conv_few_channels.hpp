#pragma once
// Convolutions of channels-last 16-bit images with few input channels (an RGB stem) on the
// tensor cores, our own kernels: the forward pass and the weight gradient as implicit GEMMs that
// gather each tile's input window into shared memory once and feed the tensor cores from it,
// accumulating in float32. cuDNN 9 runs ResNet-50's stem (7x7, stride 2, 3 -> 64 channels,
// 224x224, batch 128) slowly in bfloat16 on Hopper: on an H200 its forward took 0.93 ms and its
// weight gradient 0.92 ms, against 0.30 and 0.61 ms in float16, for about 30 GFLOP and 240 MB of
// traffic each (the roofline is near 0.1 ms). Zero-padding the image to 8 channels (1.45 ms) and
// an explicit im2col followed by cuBLAS (1.34 ms forward, 1.70 ms weight gradient) were slower.
// No data gradient: the stem's input is the image. Both also take float32, multiplied as TF32
// (operands rounded to TF32, float32 accumulation): in float32 on an H100 cuDNN's stem forward
// took 0.73 ms plus 0.06 ms of tensor conversions before it, and its weight gradient 0.49 ms plus
// 0.47 ms of conversions and padding.
//
// Internal to the CUDA backend; src/backend/cuda/cudnn/convolution.cpp times these kernels
// against cuDNN once per shape and routes the problem to the faster.

#include "backend/kernels.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// True when these kernels take conv(x, w) with p: x (N, C, H, W) and w (O, C, KH, KW) on one
/// GPU of compute capability 8.0 or newer, both channels-last (packed NHWC and OHWI strides),
/// both bfloat16, both float16 or both float32 (multiplied as TF32, so a caller routes float32
/// here only where TF32 is allowed; its blocks' shared memory must also fit the device's), one
/// group, no dilation, 1 <= C <= 4, O a multiple of 8, a non-empty output, and a window small
/// enough that a 16x16-pixel output tile's input patch ((15 * stride + K) squared) holds at most
/// 1536 pixels and KH * KW <= 128.
bool conv_few_channels_fits(const Tensor& x, const Tensor& w, const Conv2dParams& p);

/// y = conv(x, w) (no bias). Requires conv_few_channels_fits(x, w, p); y (N, O, OH, OW)
/// channels-last in x's dtype, its data 16-byte aligned.
void conv_few_channels_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y);

/// gw = beta*gw + the gradient of conv(x, w) with respect to w, given gy: accumulated in float32
/// in a fixed order (the same bits on every run on one GPU) and rounded once. Requires
/// conv_few_channels_fits(x, gw, p); gy (N, O, OH, OW) channels-last with 16-byte aligned data,
/// gw (O, C, KH, KW) channels-last, both in x's dtype.
void conv_few_channels_backward_weight(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta,
                                       Tensor& gw);

}  // namespace dpl::backend::cuda_detail
