#pragma once
// Normalisation by each sample's own statistics: layer normalisation over the last dimensions and
// group normalisation over groups of channels. Unlike batch_norm (dpl/autograd/ops/batch_norm.hpp),
// the statistics do not depend on the rest of the batch, so training and evaluation compute the
// same thing and there are no running statistics.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"
#include "dpl/core/shape.hpp"

namespace dpl {

/// Layer normalisation (PyTorch's F.layer_norm): every slice of x over its last
/// normalized_shape.size() dimensions, which must equal normalized_shape (non-empty, every extent
/// >= 1), is normalised by its own mean and biased variance, y = (x - mean) / sqrt(var + eps) *
/// weight + bias, with weight and bias of shape normalized_shape applied element by element.
/// x: any float dtype and rank >= normalized_shape.size(), any strides (read as row-major).
/// weight, bias: each undefined (scale 1, shift 0) or of shape normalized_shape on x's device, of
/// x's dtype or float32 (a model's parameters are float32, or all 16-bit once optim::MixedPrecision
/// has cast the model: both work with a 16-bit x); they are widened to float32 for the arithmetic
/// and their gradients rounded once to their dtype. The statistics are float32 whatever x's dtype.
/// Requires eps > 0. Returns a contiguous tensor of x's shape and dtype.
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight = {},
                    const Variable& bias = {}, double eps = 1e-5);

/// Group normalisation (PyTorch's F.group_norm): x (N, C, *) of rank >= 2 (an image (N, C, H, W)
/// in either memory format, a sequence (N, C, L), ...); its C channels form num_groups groups of
/// C / num_groups consecutive channels, and each sample's group (C / num_groups channels times
/// every trailing position) is normalised by its own mean and biased variance, then channel c is
/// scaled by weight[c] and shifted by bias[c]. Requires num_groups >= 1 dividing C, eps > 0, and
/// weight and bias each undefined (scale 1, shift 0) or of shape (C,) on x's device, of x's dtype or
/// float32 (as layer_norm's). The statistics are float32 whatever x's dtype. Returns a contiguous
/// tensor of x's shape and dtype (a channels-last input is read through a contiguous copy).
Variable group_norm(const Variable& x, std::int64_t num_groups, const Variable& weight = {}, const Variable& bias = {},
                    double eps = 1e-5);

}  // namespace dpl
