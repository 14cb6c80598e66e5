#pragma once
// CUDA devices from the user's side: selection, synchronisation, memory statistics and pinned
// host memory. Includes no CUDA header, and links in every build: without the CUDA backend (or
// without a GPU) the queries report no device and the actions throw dpl::Error.

#include <cstddef>
#include <cstdint>
#include <functional>

namespace dpl::cuda {

/// Memory counters of one device's caching allocator (or of the pinned host allocator).
/// Sizes are in bytes and count whole blocks (requests rounded up to the allocator's granule).
struct MemoryStats {
  /// Bytes in blocks handed out and not yet freed.
  std::size_t current = 0;
  /// Highest value of `current` since the allocator started or since reset_peak().
  std::size_t peak = 0;
  /// Bytes held from the driver but free: reusable without a new cudaMalloc.
  std::size_t cached = 0;
  /// Bytes held from the driver in all (current + cached).
  std::size_t reserved = 0;
  /// Number of driver allocations (cudaMalloc / cudaHostAlloc) made so far.
  std::uint64_t driver_allocs = 0;
  /// Number of driver frees (cudaFree / cudaFreeHost) made so far.
  std::uint64_t driver_frees = 0;
  /// Number of allocation requests served so far (from the cache or from the driver).
  std::uint64_t allocations = 0;
};

/// The counters of device's allocator. Requires 0 <= device < cuda_device_count(); a device that
/// has not been used yet reports zeros.
MemoryStats memory_stats(int device = 0);
/// Bytes a new allocation on device can still get: what the driver reports free
/// (cudaMemGetInfo) plus what dpl's allocator holds cached and unused. Same requirement as
/// memory_stats; throws dpl::Error naming the device when the driver cannot say.
std::size_t available_memory(int device = 0);
/// Sets device's `peak` to its `current`. Same requirement as memory_stats.
void reset_peak(int device = 0);
/// Returns device's wholly free cached segments to the driver (waits for the device first).
void empty_cache(int device = 0);
/// False when DPL_CUDA_NO_CACHING=1 was set at start-up: then every allocation and free goes
/// to the driver (for debugging with compute-sanitizer), and `cached` stays 0.
bool caching_enabled();

/// Makes device current for the calling thread (what cudaSetDevice does). dpl's own kernels do not
/// depend on it — a tensor names its device — but libraries called next to dpl (NCCL, cuDNN) do.
/// Throws dpl::Error for a device that does not exist.
void set_device(int device);
/// The calling thread's current device, or -1 when there is no GPU.
int current_device();
/// Waits until all work queued by dpl on device is done. Throws dpl::Error for a device that does
/// not exist, and with the first asynchronous error a kernel reported.
void synchronize(int device = 0);
/// Picks and makes current the GPU for the process with the given rank within its node:
/// intra_rank % cuda_device_count(), unless DPL_CUDA_DEVICE is set: a number picks that device
/// for every process, a comma-separated list ("0,2") gives entry intra_rank % length. Returns
/// the device, or -1 (selecting nothing) when there is no GPU. Throws dpl::Error when
/// DPL_CUDA_DEVICE is malformed or names a device that does not exist.
int select_device_for_local_rank(int intra_rank);

/// Lets matrix products use TF32 tensor cores (about 10 mantissa bits in the products). Off by
/// default, so that CUDA results agree with the CPU to float32 precision; DPL_CUDA_TF32=1 at
/// start-up turns it on. Applies to products queued after the call.
void set_allow_tf32(bool on);
/// Whether matrix products may use TF32.
bool allow_tf32();

/// Page-locked host memory from a cache: copies between it and a device run asynchronously.
/// nbytes 0 gives a minimal block. Throws dpl::Error without a GPU or when the driver refuses.
void* pinned_allocate(std::size_t nbytes);
/// Returns p (from pinned_allocate) to the cache. The block is reused only after every copy that
/// was queued on dpl's streams before this call has finished, so it is safe to free a buffer
/// right after queueing a copy from it. Never throws.
void pinned_free(void* p);
/// Counters of the pinned host allocator.
MemoryStats pinned_stats();

/// Work queued on one GPU, recorded once as a CUDA graph and run again by replay() with a single
/// launch: the same kernels on the same buffers with the same arguments. Whatever the recorded
/// work allocates comes from a memory pool of the graph's own, kept until the graph is destroyed,
/// so nothing else is ever given those addresses; values a replay should see change (inputs,
/// per-step scalars) must be written into buffers the graph reads before each replay.
/// train::CapturedStep builds a training step on it (docs/cuda-graphs.md).
class Graph {
 public:
  Graph() = default;
  /// Waits for queued replays, then frees the graph and its pool.
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Records what work() queues on device from the calling thread, without running it (a graph
  /// recorded before is dropped first). Requires a GPU, the caching allocator
  /// (DPL_CUDA_NO_CACHING unset) and work that neither waits for the device nor reads values back
  /// nor copies from pageable host memory. Throws dpl::Error, with nothing recorded, when work()
  /// throws or CUDA invalidates the recording.
  void capture(int device, const std::function<void()>& work);
  /// Queues one run of the recorded work on the device's stream, after the work queued before.
  /// Requires captured() (dpl::Error otherwise).
  void replay();
  /// Whether a recording is held.
  bool captured() const { return handle_ != nullptr; }
  /// The device recorded on; -1 when nothing is.
  int device() const;

 private:
  void reset() noexcept;
  void* handle_ = nullptr;
};

/// Whether device's work is being recorded into a Graph right now (queued work is then recorded,
/// not run). False without a GPU.
bool is_capturing(int device = 0);

/// Marks the work queued from now on for a profiler started with its capture off (Nsight Compute's
/// --profile-from-start off), until profiler_stop(); lets a program profile a few steps and not its
/// set-up. Does nothing without a GPU.
void profiler_start();
void profiler_stop();

}  // namespace dpl::cuda
