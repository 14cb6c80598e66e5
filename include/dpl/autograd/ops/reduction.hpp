#pragma once
// Reductions: over all elements (sum, mean) and over the last dimension (softmax, log_softmax,
// argmax).
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Sum and mean of all elements, any rank (one-element result of shape ()).
Variable sum(const Variable& x);
Variable mean(const Variable& x);
/// softmax over the last dimension, any rank >= 1 (every leading index is a row). Float input.
Variable softmax(const Variable& x);
/// log(softmax(x)) over the last dimension, computed as x - logsumexp(x) (finite where softmax
/// underflows), any rank >= 1. Float input.
Variable log_softmax(const Variable& x);
/// Index of the largest value along the last dimension (the first on ties; a NaN counts as the
/// largest), as an int64 tensor of x's shape without its last dimension; no gradient. Float input
/// of rank >= 1 with a non-empty last dimension.
Tensor argmax(const Variable& x);

}  // namespace dpl
