#pragma once
// Batch normalisation of channels-last (NHWC) images on the GPU, our own kernels: cuDNN 9's
// batch-norm calls run channels-last bfloat16 and float32 through layout conversions or slow
// generic kernels (on the H200 they took half of a ResNet-50 step), and its fused BN+ReLU and
// BN+add+ReLU exist for float16 only. These kernels treat an image as a matrix of N*H*W rows by
// C channels: one pass gathers per-channel moments (shifted sums, float32), one applies the affine
// map with the optional residual add and ReLU; backward likewise, one reduction pass and one
// elementwise pass. Statistics are float32 (C,); weight and bias (C,) may be float32 or 16-bit (a
// model that optim::MixedPrecision cast), read in their own dtype, and their gradients are
// written in it.
//
// Internal to the CUDA backend; src/backend/cuda/cudnn/batch_norm.cpp routes channels-last
// inputs here.

#include "backend/kernels.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// Every operand channels-last with x's strides (y, z), float32 (C,) vectors contiguous.
/// y = act(batch_norm(x) [+ z]), act = ReLU when relu; updates the running statistics
/// (momentum, unbiased variance) and writes save_mean and save_invstd. weight and bias: any float
/// dtype (one each), contiguous. batches, one int64 element (or none: nothing counted), is
/// incremented by the thread that updates channel 0's running statistics: no kernel of its own.
void batch_norm_nhwc_train(const Tensor& x, const Tensor* z, bool relu, const Tensor& weight, const Tensor& bias,
                           float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                           Tensor& y, Tensor& save_mean, Tensor& save_invstd);

/// batch_norm_nhwc_train with the batch statistics from per-channel sums of x and of x squared
/// over its N*H*W rows (float32 (C,), as a convolution's epilogue computes them for its output)
/// instead of a pass over x: the pass that the fused statistics save.
void batch_norm_nhwc_train_from_sums(const Tensor& x, const Tensor* z, bool relu, const Tensor& sum,
                                     const Tensor& sum_of_squares, const Tensor& weight, const Tensor& bias, float eps,
                                     float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                                     Tensor& y, Tensor& save_mean, Tensor& save_invstd);

/// Gradients of batch_norm_nhwc_train. With a ReLU, g = gy masked by the ReLU's output being
/// positive: read from y when y is given (a residual was added), else recomputed from x with
/// relu_bias (the forward's bias) when that is given; neither: no ReLU, g = gy. gx = beta*gx +
/// dL/dx; gz = g when gz is non-null (the residual's gradient). x, y, gy,
/// gx and gz share x's strides. gweight = param_beta * gweight + dL/dweight, gbias likewise: any
/// float dtype, contiguous (the parameters' own gradient buffers, so that no conversion or
/// addition follows).
void batch_norm_nhwc_backward(const Tensor& x, const Tensor* y, const Tensor* relu_bias, const Tensor& gy,
                              const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, float beta,
                              Tensor& gx, Tensor* gz, float param_beta, Tensor& gweight, Tensor& gbias);

/// batch_norm_nhwc_backward for a gradient g that arrives already masked by the ReLU and with its
/// reductions computed where it was completed (per channel, float32 (C,): the sum of g and of
/// g · (x − save_mean)): no reduction pass, only the finalize and the elementwise pass. gx =
/// beta*gx + dL/dx; gweight and gbias as batch_norm_nhwc_backward's. The residual's gradient, where
/// there is one, is g itself.
void batch_norm_nhwc_backward_from_sums(const Tensor& x, const Tensor& g, const Tensor& sum_g, const Tensor& sum_gx,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        float beta, Tensor& gx, float param_beta, Tensor& gweight, Tensor& gbias);

/// y = max_pool(relu(batch_norm(x)), p), a network's stem, in training mode: the statistics as
/// batch_norm_nhwc_train computes them (from sums[0] and sums[1], x's per-channel sums and sums of
/// squares, when sums is given), then one pass that normalises each window's values, applies the
/// ReLU and pools them, so that the normalised image is never stored. argmax (kUInt8, y's shape
/// and strides) and y as max_pool_nhwc writes them for that image: the same values and winners,
/// bit for bit. Requires max_pool_nhwc_fits(x, p), y channels-last.
void batch_norm_relu_max_pool_nhwc_train(const Pool2dParams& p, const Tensor& x, const Tensor* sums,
                                         const Tensor& weight, const Tensor& bias, float eps, float momentum,
                                         Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y,
                                         Tensor& argmax, Tensor& save_mean, Tensor& save_invstd);

/// Gradients of batch_norm_relu_max_pool_nhwc_train from its y, argmax and statistics, and gy, y's
/// gradient: one reduction over the pooled outputs (reading x only at the winners) and one pass
/// over x that gathers each pixel's pooled gradient, masks it by the ReLU and writes gx = beta*gx
/// + dL/dx; no gradient of the normalised image is stored. gweight and gbias as
/// batch_norm_nhwc_backward's.
void batch_norm_relu_max_pool_nhwc_backward(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                                            const Tensor& argmax, const Tensor& gy, const Tensor& weight,
                                            const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd,
                                            float beta, Tensor& gx, float param_beta, Tensor& gweight,
                                            Tensor& gbias);

}  // namespace dpl::backend::cuda_detail
