#pragma once
// Linear algebra ops: matmul, bmm and linear.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// The matrix product with PyTorch's rules for the operands' ranks (torch.matmul):
/// (N, K) x (K, M) -> (N, M); a 1-D first operand (K) is a row (1, K) and a 1-D second operand (K)
/// a column (K, 1), their extent dropped from the result (both 1-D: the dot product, shape ());
/// operands of more than two dimensions are batches of matrices over the leading dimensions,
/// which broadcast (extents equal or 1, missing ones counted as 1): (B, 1, N, K) x (C, K, M) ->
/// (B, C, N, M). A batch times a 2-D matrix is one matrix product over the folded batch.
/// Requires equal inner extents. Returns a new contiguous tensor.
Variable matmul(const Variable& a, const Variable& b);
/// A batch of matrix products: (B, N, K) x (B, K, M) -> (B, N, M) with one batch extent B, no
/// broadcasting (torch.bmm). Returns a new contiguous tensor.
Variable bmm(const Variable& a, const Variable& b);
/// y = x W^T + b for x (..., in) of rank >= 1, W (out, in), b (out,) or undefined (no bias); y is
/// (..., out).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());

}  // namespace dpl
