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
/// A transformer block's two-layer perceptron, linear(gelu(linear(x, w1, b1), tanh), w2, b2), for
/// x (..., in), w1 (hidden, in), b1 (hidden,), w2 (out, hidden) and b2 (out,); y is (..., out).
/// With both biases it is one op whose GELU runs in the first product's epilogue and whose GELU
/// derivative and first bias gradient run in the epilogue of the product that gives the hidden
/// layer's gradient (cuBLASLt, 16-bit on the GPU), so neither the activation nor its gradient
/// takes a pass over memory of its own; elsewhere it computes the same in float32 with each
/// result rounded once. An undefined bias makes it that composition of ops. Like the composition
/// it keeps the hidden layer before and after the activation for backward.
Variable gelu_mlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2);

}  // namespace dpl
