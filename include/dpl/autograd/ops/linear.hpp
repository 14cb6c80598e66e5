#pragma once
// Linear algebra ops: matmul and linear.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// (N,K) x (K,M) -> (N,M); 2-D only.
Variable matmul(const Variable& a, const Variable& b);
/// y = x W^T + b for x (N,in), W (out,in), b (out,) or undefined (no bias); 2-D only.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());

}  // namespace dpl
