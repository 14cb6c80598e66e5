// The public dpl::cuda API in builds without the CUDA backend: queries report no device, and
// actions that need one fail with a clear dpl::Error rather than a link error.
#include "dpl/core/cuda.hpp"
#include "dpl/core/error.hpp"

namespace dpl::cuda {

namespace {
[[noreturn]] void no_backend(const char* what) {
  DPL_FAIL("cuda::", what, ": this build of dpl has no CUDA backend (configure with -DDPL_WITH_CUDA=ON on a "
           "machine with the CUDA toolkit)");
}
}  // namespace

MemoryStats memory_stats(int) { no_backend("memory_stats"); }
void reset_peak(int) { no_backend("reset_peak"); }
void empty_cache(int) { no_backend("empty_cache"); }
bool caching_enabled() { return false; }
void set_device(int) { no_backend("set_device"); }
int current_device() { return -1; }
void synchronize(int) { no_backend("synchronize"); }
int select_device_for_local_rank(int intra_rank) {
  DPL_CHECK(intra_rank >= 0, "cuda::select_device_for_local_rank: expected an intra-node rank >= 0, got ",
            intra_rank);
  return -1;
}
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void* pinned_allocate(std::size_t) { no_backend("pinned_allocate"); }
void pinned_free(void*) {}
MemoryStats pinned_stats() { return {}; }

}  // namespace dpl::cuda
