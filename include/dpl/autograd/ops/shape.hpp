#pragma once
// Shape ops: new shapes of the same data, joins and splits, and padding (picking by index is in
// indexing.hpp). Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.
//
// Views: where PyTorch returns a view (view, reshape when the strides allow, transpose, permute,
// squeeze, unsqueeze, expand, narrow, slice, split, chunk, contiguous of a contiguous input), so
// do these ops: the result shares the input's storage (Tensor::shares_storage_with) and nothing
// is copied. A view may be strided; every op reads its inputs in the layout its kernels need
// (copying a strided input when they need it dense), so views can be fed to any op. Writing
// into a view's data writes into the input's.
//
// Dimensions may be negative (counted from the end, as in PyTorch).

#include <cstdint>
#include <vector>

#include "dpl/autograd/variable.hpp"

namespace dpl {

// --- views and copies of one input --------------------------------------------------------------

/// The same elements in row-major order with a new shape (one extent may be -1, inferred).
/// Requires as many elements. Returns a view when x's strides allow one (always for a contiguous
/// x), else a contiguous copy.
Variable reshape(const Variable& x, const Shape& shape);
/// As reshape, but only ever a view: requires strides that allow viewing x with `shape`
/// (PyTorch's view); throws dpl::Error saying to use reshape (or contiguous) otherwise.
Variable view(const Variable& x, const Shape& shape);
/// Collapses dimensions start_dim..last into one ((N, C, H, W) -> (N, CHW) for start_dim 1); a
/// view where reshape gives one.
Variable flatten(const Variable& x, std::int64_t start_dim = 1);
/// x with dimensions d0 and d1 swapped: a view (strided; not contiguous unless an extent is 1).
Variable transpose(const Variable& x, std::int64_t d0, std::int64_t d1);
/// x with its dimensions in the order `dims` (a permutation of 0..rank-1): a view.
Variable permute(const Variable& x, const std::vector<std::int64_t>& dims);
/// x without its extents of 1: a view.
Variable squeeze(const Variable& x);
/// x without dimension dim when its extent is 1 (x itself, viewed, otherwise): a view.
Variable squeeze(const Variable& x, std::int64_t dim);
/// x with a new dimension of extent 1 at position dim (-1: last; dim in [-rank-1, rank]): a view.
Variable unsqueeze(const Variable& x, std::int64_t dim);
/// x's values contiguous in row-major order: x itself when it already is, else a copy.
Variable contiguous(const Variable& x);
/// x broadcast to `shape` without copying: extents of 1 (and new leading dimensions) repeat with
/// stride 0; -1 keeps x's extent. Requires x's extents to equal `shape`'s or be 1. The gradient
/// sums over the repeated dimensions.
Variable expand(const Variable& x, const Shape& shape);
/// The slice [start, start + length) of dimension dim (start may be negative): a view.
Variable narrow(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t length);
/// Elements start, start + step, ... below end of dimension dim, as Python's x[start:end:step]
/// (negative start and end count from the end; both are clamped to the extent): a view. Requires
/// step >= 1.
Variable slice(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1);

// --- joins and splits -------------------------------------------------------------------------

/// The inputs joined along dimension dim (a new contiguous tensor). Requires at least one input;
/// all of one rank, dtype and device, with equal extents except at dim.
Variable cat(const std::vector<Variable>& xs, std::int64_t dim = 0);
/// The inputs stacked along a new dimension dim (cat of the inputs unsqueezed at dim). Requires
/// at least one input, all of one shape, dtype and device.
Variable stack(const std::vector<Variable>& xs, std::int64_t dim = 0);
/// Views of consecutive pieces of `split_size` elements along dim (the last may be shorter).
/// Requires split_size >= 1.
std::vector<Variable> split(const Variable& x, std::int64_t split_size, std::int64_t dim = 0);
/// Views of consecutive pieces of the given sizes along dim. Requires sizes >= 0 that sum to the
/// extent of dim.
std::vector<Variable> split(const Variable& x, const std::vector<std::int64_t>& sizes, std::int64_t dim = 0);
/// At most `chunks` views of equal pieces along dim (ceil(extent / chunks) each, the last
/// shorter), as PyTorch's chunk. Requires chunks >= 1.
std::vector<Variable> chunk(const Variable& x, std::int64_t chunks, std::int64_t dim = 0);
/// x padded with `value` (constant mode, PyTorch's F.pad): pads holds (before, after) pairs,
/// the last dimension's first, then the one before it, ...: {left, right, top, bottom} pads the
/// last two dimensions. Requires an even number of pads, at most two per dimension; a negative
/// pad crops. Returns a new contiguous tensor.
Variable pad(const Variable& x, const std::vector<std::int64_t>& pads, double value = 0.0);

}  // namespace dpl
