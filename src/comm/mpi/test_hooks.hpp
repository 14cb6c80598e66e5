#pragma once
// Test hooks of the MPI communicators: overrides that tests set to reach paths a small run never
// takes (MPI calls cut into chunks, windows of several chunks, the message-passing fallback,
// either kind of window stores). The communicators only read them; nothing but tests sets them,
// and their defaults leave every path as the settings choose. Not thread-safe: set them between
// collectives, alike on every rank. Internal header.

#include <cstdint>
#include <optional>

#include "dpl/core/settings.hpp"

namespace dpl::comm::test_hooks {

/// The overrides in force. Each default means "none".
struct MpiOverrides {
  std::int64_t max_count = 0;           // most elements per MPI call; 0: MPI's own limit (INT_MAX)
  std::int64_t shared_chunk_bytes = 0;  // bytes per chunk of windows created afterwards; 0: their own
  bool shared_window_allowed = true;    // false: NodeSharedAllreduce::create returns null
  std::optional<WindowStoresSetting> shared_window_stores;  // nullopt: DPL_WINDOW_STORES
};

/// The overrides that tests have set (all defaults in a program that sets none).
const MpiOverrides& mpi_overrides();

/// Lowers the per-call element limit (comm::detail::max_count()) so that small buffers take the
/// chunked paths; n <= 0 restores INT_MAX.
void set_max_count(std::int64_t n);
/// The bytes per chunk of windows created afterwards (rounded down to a cache line; 0 restores the
/// default), so that small buffers run the multi-chunk paths.
void set_shared_chunk_bytes(std::int64_t bytes);
/// Whether NodeSharedAllreduce::create may build windows (true, the default); false makes it
/// return null, so communicators created afterwards take their message-passing path.
void set_shared_window_allowed(bool allowed);
/// The stores of windows created afterwards, in place of DPL_WINDOW_STORES (nullopt: the setting
/// again). Where the build has no streaming stores (not x86-64) every window writes with ordinary
/// ones.
void set_shared_window_stores(std::optional<WindowStoresSetting> stores);

}  // namespace dpl::comm::test_hooks
