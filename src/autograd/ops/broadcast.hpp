#pragma once
// What the elementwise and reduction families share beyond support.hpp: PyTorch's broadcast
// shapes, sums over a set of dimensions, and the reduction of a broadcast gradient back to its
// operand's shape.

#include <initializer_list>
#include <optional>
#include <vector>

#include "autograd/ops/support.hpp"

namespace dpl::ops_detail {

/// PyTorch's broadcast of `shapes` (aligned at their last dimension; each extent equal to the
/// result's or 1), or nullopt when they do not broadcast.
std::optional<Shape> try_broadcast_shapes(std::initializer_list<const Shape*> shapes);
/// try_broadcast_shapes, throwing dpl::Error naming `op` and the shapes when they do not broadcast.
Shape broadcast_shapes(const char* op, std::initializer_list<const Shape*> shapes);
/// s with leading 1s added up to `rank` dimensions (rank >= s.size()).
Shape padded_shape(const Shape& s, std::size_t rank);

/// alpha * the sum of x (any tensor) over the dimensions d with reduced[d], keeping them as
/// extent 1: contiguous, of x's dtype and device, one reduce_dim pass per run of adjacent
/// reduced dimensions (a run of dimensions is reduced as one).
Tensor sum_dims_keep(const Tensor& x, const std::vector<bool>& reduced, float alpha);

/// target = beta*target + alpha * g summed down to the target's shape, for g (contiguous) of a
/// shape that target's broadcasts to.
void reduce_to_target(const Tensor& g, float alpha, GradTarget& target);

}  // namespace dpl::ops_detail
