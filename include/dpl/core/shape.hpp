#pragma once
// Shapes and strides of tensors.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace dpl {

/// Extent of each dimension, outermost first. An empty shape is a scalar (one element).
using Shape = std::vector<std::int64_t>;
/// Distance in elements between neighbours along each dimension.
using Strides = std::vector<std::int64_t>;

/// Product of the extents (1 for a scalar).
std::int64_t shape_numel(const Shape& shape);
/// Row-major (C order) strides for shape.
Strides contiguous_strides(const Shape& shape);
/// "(2, 3)" style text, "()" for a scalar.
std::string shape_str(const Shape& shape);

}  // namespace dpl
