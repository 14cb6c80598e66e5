#include "optim/segments.hpp"

#include <algorithm>
#include <limits>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::optim::detail {

namespace {
SegmentTable table_of_group(const nn::ParameterArena& arena, const std::vector<std::size_t>& entry_groups,
                            std::size_t group, const std::function<std::int32_t(const nn::ArenaEntry&)>& flags_of) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  std::vector<std::int32_t> rows;
  std::int64_t chunks = 0;
  const auto& entries = arena.entries();
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (entry_groups.at(s) != group) continue;
    const nn::ArenaEntry& e = entries[s];
    const std::int64_t count = (e.numel + backend::kSegmentChunk - 1) / backend::kSegmentChunk;
    // Offsets travel divided by the alignment of 16, which arenas guarantee.
    DPL_CHECK(e.offset % nn::kArenaAlignment == 0 && e.offset / 16 <= kMax && chunks + count <= kMax, "optimizer: ",
              "the arena's parameter '", e.name, "' at element ", e.offset, " is beyond the per-tensor table's reach");
    const std::int32_t flags = flags_of ? flags_of(e) : 0;
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t begin = e.offset + k * backend::kSegmentChunk;
      const std::int64_t length = std::min(backend::kSegmentChunk, e.numel - k * backend::kSegmentChunk);
      rows.insert(rows.end(), {static_cast<std::int32_t>(begin / 16), static_cast<std::int32_t>(length),
                               static_cast<std::int32_t>(s), static_cast<std::int32_t>(chunks),
                               static_cast<std::int32_t>(count), flags});
    }
    chunks += count;
  }
  SegmentTable table;
  table.rows = Tensor::from_vector(rows, {chunks, backend::kSegmentTableColumns}).to(arena.device());
  table.partials = Tensor::zeros({chunks, 2}, TensorOptions(kFloat32, arena.device()));
  return table;
}
}  // namespace

std::vector<SegmentTable> segment_tables(const nn::ParameterArena& arena, const std::vector<std::size_t>& entry_groups,
                                         std::size_t group_count,
                                         const std::function<std::int32_t(const nn::ArenaEntry&)>& flags_of) {
  std::vector<SegmentTable> tables;
  for (std::size_t g = 0; g < group_count; ++g) tables.push_back(table_of_group(arena, entry_groups, g, flags_of));
  return tables;
}

}  // namespace dpl::optim::detail
