#pragma once
// Losses and metrics: softmax cross-entropy, accuracy, mean squared error.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Mean over the batch of the cross-entropy between softmax(logits) and the target distribution
/// (1 - label_smoothing) * onehot(label) + label_smoothing / C (PyTorch's label smoothing; 0 gives
/// -log softmax(logits)[label]). logits (N,C), labels (N,) int32 in [0, C), label_smoothing in
/// [0, 1). Result has shape (). Host labels outside [0, C) throw dpl::Error; labels on a GPU
/// are not read back to be checked (that would stall every step): an out-of-range label there
/// gives a NaN loss, so check labels when loading them.
Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing = 0.f);
/// Fraction of rows whose arg-max is the label (no gradient). Result has shape ().
Tensor accuracy(const Variable& logits, const Tensor& labels);
/// Mean of (x - target)^2 over all elements; result has shape (). x and target have one shape,
/// float dtype and device; both get gradients when they require them.
Variable mse_loss(const Variable& x, const Variable& target);

}  // namespace dpl
