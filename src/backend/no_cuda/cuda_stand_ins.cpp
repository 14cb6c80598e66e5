// The one place of stand-ins for the CUDA backend in builds without CUDA: device queries report
// no GPU, and whatever needs a GPU fails with a dpl::Error that says the build has no CUDA
// backend instead of failing to link. Kernels need no stand-ins: the dispatcher reports a CUDA
// tensor in such a build itself (backend/dispatch.cpp).
#include "backend/cuda_api.hpp"
#include "backend/kernels.hpp"
#include "backend/side_lane.hpp"
#include "backend/side_stream_copy.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

void copy_between_devices(const Tensor& src, Tensor& dst) {
  DPL_FAIL("copy from ", src.device(), " to ", dst.device(), ": ", kNoCudaBackend);
}

// No group can be started, so the other members only ever see an inactive one.
SideStreamCopy::SideStreamCopy(Device device) {
  DPL_FAIL("SideStreamCopy: a copy to ", device, " was requested, but ", kNoCudaBackend);
}
SideStreamCopy::~SideStreamCopy() = default;
SideStreamCopy::SideStreamCopy(SideStreamCopy&&) noexcept = default;
SideStreamCopy& SideStreamCopy::operator=(SideStreamCopy&&) noexcept = default;
void SideStreamCopy::reset() noexcept {}
void SideStreamCopy::copy(const Tensor&, Tensor&) { DPL_FAIL("SideStreamCopy::copy: ", kNoCudaBackend); }
void SideStreamCopy::order_compute_after() const {}
void SideStreamCopy::wait() const {}

// No lane can be made, so no other member is ever reached.
SideLane::SideLane(int device) {
  DPL_FAIL("SideLane: a side stream on cuda:", device, " was requested, but ", kNoCudaBackend);
}
SideLane::~SideLane() = default;
void SideLane::release() noexcept {}
void SideLane::prepare(std::size_t) {}
void SideLane::mark_ready(std::size_t) {}
void SideLane::mark_backward_end() {}
SideLane::Scope::Scope(SideLane& lane) : lane_(lane) {}
SideLane::Scope::~Scope() = default;
void SideLane::begin_item(std::size_t) {}
void SideLane::end_item(std::size_t) {}
void SideLane::join() {}
SideLane::Times SideLane::times(std::size_t) { return {}; }

namespace cuda_api {

namespace {
[[noreturn]] void no_backend(const char* what) { DPL_FAIL("cuda::", what, ": ", kNoCudaBackend); }
}  // namespace

int device_count() noexcept { return 0; }
cuda::MemoryStats memory_stats(int) { no_backend("memory_stats"); }
std::size_t driver_free_memory(int) { no_backend("available_memory"); }
void reset_peak(int) { no_backend("reset_peak"); }
void profiler_capture(bool) {}
void empty_cache(int) { no_backend("empty_cache"); }
bool caching_enabled() { return false; }
void set_device(int) { no_backend("set_device"); }
int current_device() { return -1; }
void synchronize(int) { no_backend("synchronize"); }
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void* pinned_allocate(std::size_t) { no_backend("pinned_allocate"); }
void pinned_free(void*) noexcept {}
cuda::MemoryStats pinned_stats() { return {}; }
struct RecordedGraph {};
RecordedGraph* graph_capture(int, const std::function<void()>&) { no_backend("Graph::capture"); }
void graph_replay(RecordedGraph*) { no_backend("Graph::replay"); }
void graph_destroy(RecordedGraph*) noexcept {}
int graph_device(const RecordedGraph*) { return -1; }
bool is_capturing(int) { return false; }

}  // namespace cuda_api
}  // namespace dpl::backend
