#pragma once
// A cache of large host blocks for the CPU backend.
//
// A training step allocates the same few activation and gradient buffers (hundreds of KiB each)
// every iteration. Straight from malloc, such blocks come from fresh pages: glibc serves them by
// mmap or trims its heap when they are freed, so every step pays page faults and the kernel's
// zeroing of those pages (measured: about a tenth of an MLP step on two cores). Keeping freed
// blocks by size and handing them out again removes that cost.

#include <cstddef>

namespace dpl::backend {

/// Blocks below this size go straight to the system allocator (malloc keeps those warm itself).
inline constexpr std::size_t kHostCacheMinBytes = std::size_t{64} << 10;
/// Freed blocks beyond this many cached bytes are returned to the system at once.
inline constexpr std::size_t kHostCacheMaxBytes = std::size_t{512} << 20;

/// 64-byte aligned host memory of at least nbytes; throws dpl::Error when the system refuses.
void* host_cache_allocate(std::size_t nbytes);
/// Returns p (from host_cache_allocate) to the cache or the system.
void host_cache_free(void* p);

}  // namespace dpl::backend
