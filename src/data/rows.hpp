#pragma once
// Row gathering shared by Dataset::gather, BatchIterator and scatter_dataset.

#include <cstdint>

#include "dpl/data/dataset.hpp"

namespace dpl::data::detail {

/// Copies the samples at indices[0..count) of ds into rows [0, count) of images_out (float32,
/// contiguous, at least count rows of ds's sample size) and labels_out (int32, contiguous).
/// Indices are trusted to lie in [0, ds.size()): callers build them from orders they own.
void copy_rows(const Dataset& ds, const std::int64_t* indices, std::int64_t count, float* images_out,
               std::int32_t* labels_out);

}  // namespace dpl::data::detail
