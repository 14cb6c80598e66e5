#pragma once
// Reductions: over all elements (sum, mean), along dimensions (sum, mean, max, min, argmax,
// argmin) and over the last dimension (softmax, log_softmax, argmax).
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <cstdint>
#include <vector>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// What max and min along a dimension return, as PyTorch's (values, indices): the extreme values
/// (differentiable) and their positions along the dimension (int64, no gradient), both of the
/// reduced shape.
struct ValuesIndices {
  Variable values;
  Tensor indices;
};

/// Sum and mean over the dimensions `dims` (each in [-rank, rank), negative counting from the
/// end; none repeated; an empty list means every dimension, as PyTorch), any rank. The result
/// drops those dimensions, or keeps them with extent 1 when keepdim; it is contiguous, summed in
/// float32. mean requires the reduced dimensions to hold at least one element.
Variable sum(const Variable& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Variable mean(const Variable& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Largest and smallest values along dimension `dim` (negative counts from the end) with their
/// indices, as PyTorch's max(x, dim) and min(x, dim): a NaN wins over every number, ties go to
/// the first index, and the gradient flows to that one element. The dimension must be non-empty.
ValuesIndices max(const Variable& x, std::int64_t dim, bool keepdim = false);
ValuesIndices min(const Variable& x, std::int64_t dim, bool keepdim = false);
/// The indices of max(x, dim, keepdim) and min(x, dim, keepdim) alone (int64; no gradient).
Tensor argmax(const Variable& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Variable& x, std::int64_t dim, bool keepdim = false);

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
