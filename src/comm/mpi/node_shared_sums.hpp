#pragma once
// The arithmetic of the node's shared window (node_shared_allreduce.hpp): copies into the window,
// with streaming stores where they pay (window_store_choice.hpp), the sum of the node's
// contributions in rank order, and the division of a mean. Internal header.

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstddef>
#include <cstdint>

#include "dpl/core/dtype.hpp"

namespace dpl::comm::detail {

/// Whether this build can write with streaming stores (SSE2); without them every window writes
/// with ordinary stores.
#if defined(__SSE2__)
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif

/// memcpy of n bytes, with streaming stores where `streaming`: whole 64-byte lines go straight to
/// memory without first fetching the line into this core's cache, and so without taking it from
/// a partner's cache first. The bytes before the first 16-byte boundary of dst and after the last
/// one are ordinary stores. Requires non-overlapping ranges.
void store_copy(char* dst, const char* src, std::size_t n, bool streaming);

/// Streaming stores are not ordered with later stores: the barrier's release must not overtake
/// them, or a partner could read the window before the data has arrived. Call it after the
/// stores of a `streaming` copy and before the barrier that publishes them.
inline void fence_streaming_stores(bool streaming) {
#if defined(__SSE2__)
  if (streaming) _mm_sfence();
#endif
  (void)streaming;
}

/// dst = src[0] + src[1] + ... + src[count-1] over n elements of `dtype` (float32, int32 or int64;
/// anything else throws dpl::Error), added in that order (rank order), so every node adds its
/// ranks the same way. Integers add as unsigned of their width: the same bits as MPI_SUM's
/// wrap-around. With `streaming`, dst is written with streaming stores.
void add_sources(DType dtype, char* dst, const char* const* src, int count, std::int64_t n, bool streaming);

/// x /= divisor over n float32 elements, as divide_in_place does it, so that the means of two
/// communicators agree to the bit whenever their sums do.
void divide(char* bytes, std::int64_t n, int divisor);

}  // namespace dpl::comm::detail
