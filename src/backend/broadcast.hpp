#pragma once
// The index arithmetic of PyTorch-style broadcasting, shared by the CPU and CUDA kernels that
// take operands of out's rank with extents equal to out's or 1 (binary with Broadcast::kShape,
// where). Internal header of the backend.

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

/// Where element i of a contiguous output lives in each of up to kOperands contiguous operands
/// that broadcast to it. Passed by value to a CUDA kernel, so it is a plain aggregate.
struct BroadcastIndex {
  static constexpr int kMaxDims = 8;
  static constexpr int kOperands = 3;
  int rank = 0;                                   // dimensions left after merging
  std::int64_t size[kMaxDims] = {};               // out's extents, merged
  std::int64_t stride[kOperands][kMaxDims] = {};  // element strides, 0 along a broadcast dimension

  /// off[k] = the element of operand k that broadcasts to output element i (row-major).
  template <int N>
  DPL_HOST_DEVICE void offsets(std::int64_t i, std::int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t q = i / size[d];
      const std::int64_t idx = i - q * size[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += idx * stride[k][d];
    }
  }
};

/// The index for output shape `out` and operand shapes `operands` (each of out's rank, extents
/// equal to out's or 1). Size-1 output dimensions are dropped and neighbours that every operand
/// walks the same way are merged, so most calls end up with one to three dimensions. Throws
/// dpl::Error when more than kMaxDims dimensions remain.
inline BroadcastIndex make_broadcast_index(const Shape& out, std::initializer_list<const Shape*> operands) {
  BroadcastIndex b;
  const int n = static_cast<int>(operands.size());
  std::int64_t contiguous[BroadcastIndex::kOperands] = {1, 1, 1};
  // Walk from the innermost dimension out; b holds the merged dimensions innermost-first until
  // they are reversed at the end.
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const std::int64_t extent = out[static_cast<std::size_t>(d)];
    if (extent == 1) continue;
    std::int64_t s[BroadcastIndex::kOperands] = {};
    int k = 0;
    for (const Shape* shape : operands) {
      s[k] = (*shape)[static_cast<std::size_t>(d)] == 1 ? 0 : contiguous[k];
      if ((*shape)[static_cast<std::size_t>(d)] != 1) contiguous[k] *= extent;
      ++k;
    }
    bool merge = b.rank > 0;
    for (k = 0; k < n && merge; ++k) merge = s[k] == b.stride[k][b.rank - 1] * b.size[b.rank - 1];
    if (merge) {
      b.size[b.rank - 1] *= extent;
      continue;
    }
    DPL_CHECK(b.rank < BroadcastIndex::kMaxDims, "broadcast: more than ", BroadcastIndex::kMaxDims,
              " dimensions that cannot be merged, in output shape ", shape_str(out));
    b.size[b.rank] = extent;
    for (k = 0; k < n; ++k) b.stride[k][b.rank] = s[k];
    ++b.rank;
  }
  for (int i = 0, j = b.rank - 1; i < j; ++i, --j) {
    std::swap(b.size[i], b.size[j]);
    for (int k = 0; k < BroadcastIndex::kOperands; ++k) std::swap(b.stride[k][i], b.stride[k][j]);
  }
  return b;
}

}  // namespace dpl::backend
