#pragma once
// Indexing ops: rows or elements picked by an index tensor, and embeddings.
// Part of dpl/autograd/ops.hpp, whose notes on dtypes and errors hold here.
//
// Dimensions may be negative (counted from the end, as in PyTorch). Index tensors are int64 or
// int32, on the values' device; on the CPU an index out of range is refused with dpl::Error, on a
// GPU (where checking would wait for the device) it gives NaN and no gradient.

#include <cstdint>
#include <optional>

#include "dpl/autograd/variable.hpp"

namespace dpl {

/// x with dimension dim picked by index (1-D, int64 or int32): out[.., j, ..] = x[.., index[j], ..].
/// Indices may repeat; their gradients add up (a scatter-add).
Variable index_select(const Variable& x, std::int64_t dim, const Tensor& index);
/// out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (and likewise for the other dimensions), as
/// PyTorch's gather: index (int64 or int32) has x's rank and, except at dim, extents no larger
/// than x's; out has index's shape. Gradients of repeated positions add up (a scatter-add).
Variable gather(const Variable& x, std::int64_t dim, const Tensor& index);
/// Rows of weight (num_embeddings, embedding_dim) picked by indices (int64 or int32, any shape):
/// out has indices' shape plus (embedding_dim,). The gradient adds each output row into the
/// weight row it came from, except into row padding_idx (when given; negative counts from the
/// end, as in PyTorch), which gets none. Requires padding_idx in [-num_embeddings, num_embeddings).
Variable embedding(const Tensor& indices, const Variable& weight,
                   std::optional<std::int64_t> padding_idx = std::nullopt);

}  // namespace dpl
