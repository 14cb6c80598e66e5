#pragma once
// How the indexing kernels (index_select, index_add; src/backend/cpu/index.cpp and
// src/backend/cuda/index.cu) see a contiguous tensor indexed along one dimension. Internal header.

#include <cstdint>

#include "dpl/core/shape.hpp"

namespace dpl::backend {

/// A contiguous tensor as (outer, mid, inner): the product of the extents before the indexed
/// dimension, that dimension's extent, and the product of the extents after it.
struct IndexedDims {
  std::int64_t outer = 1, mid = 1, inner = 1;
};

/// s seen as IndexedDims around dimension dim (0 <= dim < rank).
inline IndexedDims indexed_dims(const Shape& s, std::int64_t dim) {
  IndexedDims r;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(s.size()); ++d) {
    if (d < dim) r.outer *= s[static_cast<std::size_t>(d)];
    else if (d == dim) r.mid = s[static_cast<std::size_t>(d)];
    else r.inner *= s[static_cast<std::size_t>(d)];
  }
  return r;
}

}  // namespace dpl::backend
