#pragma once
// The chunk table of the per-tensor update rules (LAMB, LARS): the arena's entries cut into
// chunks, one table per parameter group, as backend::lamb_moments and the other segment kernels read them (kernels.hpp), and
// the buffer of their per-chunk partial sums. Built once per arena layout and kept on the
// arena's device, so a step reads nothing from the host and can be recorded in a CUDA graph.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dpl/nn/arena.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::optim::detail {

struct SegmentTable {
  Tensor rows;      // int32, (chunks, backend::kSegmentTableColumns)
  Tensor partials;  // float32, (chunks, 2)
};

/// One table per parameter group: table g holds the arena's entries of group g
/// (entry_groups[s] == g), in order, each entry's flags from flags_of(entry) (0 when flags_of is
/// empty); a group without entries gets an empty table. Throws dpl::Error for an arena too large
/// for the table's int32 columns.
std::vector<SegmentTable> segment_tables(const nn::ParameterArena& arena, const std::vector<std::size_t>& entry_groups,
                                         std::size_t group_count,
                                         const std::function<std::int32_t(const nn::ArenaEntry&)>& flags_of = {});

}  // namespace dpl::optim::detail
