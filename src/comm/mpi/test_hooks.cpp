#include "comm/mpi/test_hooks.hpp"

namespace dpl::comm::test_hooks {

namespace {
MpiOverrides& overrides() {
  static MpiOverrides o;
  return o;
}
}  // namespace

const MpiOverrides& mpi_overrides() { return overrides(); }

void set_max_count(std::int64_t n) { overrides().max_count = n > 0 ? n : 0; }

void set_shared_chunk_bytes(std::int64_t bytes) { overrides().shared_chunk_bytes = bytes; }

void set_shared_window_allowed(bool allowed) { overrides().shared_window_allowed = allowed; }

void set_shared_window_stores(std::optional<WindowStoresSetting> stores) { overrides().shared_window_stores = stores; }

}  // namespace dpl::comm::test_hooks
