#pragma once
// The chunk table of the per-tensor update rules (LAMB, LARS): the arena's entries cut into
// chunks as backend::lamb_moments and the other segment kernels read them (kernels.hpp), and
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

/// The table for arena's entries, in order, each entry's flags from flags_of(entry) (0 when
/// flags_of is empty). Throws dpl::Error for an arena too large for the table's int32 columns.
SegmentTable segment_table(const nn::ParameterArena& arena,
                           const std::function<std::int32_t(const nn::ArenaEntry&)>& flags_of = {});

}  // namespace dpl::optim::detail
