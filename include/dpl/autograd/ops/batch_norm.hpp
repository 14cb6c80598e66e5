#pragma once
// Batch normalisation of (N, C, H, W) images and its fusions with relu and a residual add.
// Image inputs are 4-D (N, C, H, W) by shape, in NCHW (contiguous) or channels-last memory
// (Tensor::memory_format); outputs keep the input's format. Other strides are first copied to
// NCHW.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Batch normalisation's training statistics of an image batch x (N, C, H, W) in the form a
/// convolution's epilogue can compute them for its output (conv2d_with_sums): per channel, the
/// sum of x and the sum of x squared over (N, H, W), float32 (C,) on x's device. Undefined (sum
/// undefined) when nothing computed them.
struct ChannelSums {
  Tensor sum, sum_of_squares;
  bool defined() const { return sum.defined(); }
};

/// Batch normalisation over (N, H, W) per channel of a 4-D float x with C channels.
/// weight and bias: (C,) on x's device of one float dtype (float32; or 16-bit, as in a model cast
/// by optim::MixedPrecision, widened to float32 for the arithmetic and their gradients rounded
/// back), or undefined (scale 1, shift 0). Statistics are float32 whatever x's dtype. Training: normalises with the batch mean and biased variance
/// (requires N*H*W >= 2) and, when running_mean and running_var are defined (float32 (C,)),
/// updates them in place as running = (1 - momentum) running + momentum batch, with the unbiased
/// variance (PyTorch's convention; momentum 0.1 there). Evaluation: normalises with the running
/// statistics (required); a gradient through an evaluation-mode call is not supported and throws
/// when backward reaches it. Returns x's shape, dtype and memory format.
///
/// `sums`, when given and defined, are x's ChannelSums (what conv2d_with_sums returned with x):
/// in training mode on the GPU, for channels-last x, the batch statistics are then taken from
/// them (mean = sum / count, variance = sum_of_squares / count - mean^2) instead of a pass over
/// x; elsewhere they are not needed and are ignored. Gradients are the same either way (the
/// statistics are x's); values differ only by the rounding of the two ways to the variance.
/// The caller vouches that they are x's: sums of another tensor normalise x wrongly.
///
/// `num_batches_tracked`, when defined, is the batch counter that PyTorch's BatchNorm keeps beside
/// its running statistics: an int64 scalar (one element) on x's device, incremented by one
/// whenever a training-mode call updates the running statistics (not when they are undefined, nor
/// in evaluation). On the GPU's channels-last kernels the thread that updates the statistics
/// counts too, so counting costs no launch of its own; elsewhere a small kernel adds one.
Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                    const ChannelSums* sums = nullptr, const Tensor& num_batches_tracked = Tensor());
/// relu(batch_norm(...)), same requirements; fused into one pass where the device's library can.
Variable batch_norm_relu(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                         const ChannelSums* sums = nullptr, const Tensor& num_batches_tracked = Tensor());
/// relu(batch_norm(...) + z) for z of x's shape and dtype (a residual), same requirements;
/// fused where the device's library can.
Variable batch_norm_add_relu(const Variable& x, const Variable& z, const Variable& weight, const Variable& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training,
                             double momentum = 0.1, double eps = 1e-5, const ChannelSums* sums = nullptr,
                             const Tensor& num_batches_tracked = Tensor());

}  // namespace dpl
