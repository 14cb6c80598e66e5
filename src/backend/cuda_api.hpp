#pragma once
// What core's public CUDA API (dpl/core/cuda.hpp, cuda_device_count) calls in the backend.
// Defined by the CUDA backend (src/backend/cuda/device.cpp, pinned_allocator.cpp) in CUDA
// builds and by the stand-ins of src/backend/no_cuda/cuda_stand_ins.cpp otherwise. No CUDA header.
//
// The device arguments are checked by the caller (src/core/cuda.cpp): 0 <= device < device_count().

#include <cstddef>
#include <functional>

#include "dpl/core/cuda.hpp"

namespace dpl::backend {

/// The end of every message about a CUDA request in a build without the CUDA backend.
inline constexpr const char* kNoCudaBackend =
    "this build of dpl has no CUDA backend (configure with -DDPL_WITH_CUDA=ON on a machine with the CUDA toolkit)";

namespace cuda_api {

/// Number of usable GPUs: 0 without the backend and whenever the CUDA runtime fails. Never throws.
int device_count() noexcept;
/// Counters of device's caching allocator (zeros when the device has not been used yet).
cuda::MemoryStats memory_stats(int device);
/// Bytes the driver reports free on device (cudaMemGetInfo); leaves the current device as it was.
std::size_t driver_free_memory(int device);
/// Sets device's peak to its current use.
void reset_peak(int device);
/// Returns device's wholly free cached segments to the driver.
void empty_cache(int device);
/// False when DPL_CUDA_NO_CACHING=1 was set at start-up (and always without the backend).
bool caching_enabled();
/// Makes device current for the calling thread.
void set_device(int device);
/// The calling thread's current device; requires device_count() > 0.
int current_device();
/// Waits until all work dpl queued on device is done.
void synchronize(int device);
/// Lets matrix products queued from now on use TF32, or not.
void set_allow_tf32(bool on);
bool allow_tf32();
/// Page-locked host memory from the cache (throws without a GPU or when the driver refuses).
void* pinned_allocate(std::size_t nbytes);
/// Returns p to the cache once the copies queued before now are done.
void pinned_free(void* p) noexcept;
/// Counters of the pinned host allocator.
cuda::MemoryStats pinned_stats();

/// A recorded CUDA graph (cuda::Graph's handle), opaque outside the backend.
struct RecordedGraph;
/// Records what work() queues on device's compute stream from the calling thread, with its
/// allocations in a private pool; throws dpl::Error (nothing kept) when work throws or the
/// recording is invalidated.
RecordedGraph* graph_capture(int device, const std::function<void()>& work);
/// Queues one run of the graph on its device's compute stream.
void graph_replay(RecordedGraph* graph);
/// Frees the graph and gives its pool back to the shared cache. Never throws.
void graph_destroy(RecordedGraph* graph) noexcept;
/// The graph's device.
int graph_device(const RecordedGraph* graph);
/// Whether device's compute stream is being recorded now.
bool is_capturing(int device);
/// Turns a profiler's capture on or off (cudaProfilerStart/Stop).
void profiler_capture(bool on);

}  // namespace cuda_api
}  // namespace dpl::backend
