#pragma once
// Shape ops: new shapes of the same data.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.

#include <cstdint>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// Same data, new shape (one extent may be -1).
Variable reshape(const Variable& x, const Shape& shape);
/// (N, ...) -> (N, prod(...)) for start_dim 1.
Variable flatten(const Variable& x, std::int64_t start_dim = 1);

}  // namespace dpl
