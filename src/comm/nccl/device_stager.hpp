#pragma once
// Pipelined staging of a device buffer through pinned host memory for a host collective (MPI
// that cannot read device memory). The buffer goes in chunks (4 MiB by default) through a few
// pinned slots; device-to-host copies run on one stream, host-to-device copies on another, and
// the host runs the collective of chunk k while the copy in of chunk k+1 and the copy out of
// chunk k-1 are under way (schedule: comm/staging_pipeline.hpp).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace dpl::comm::detail {

/// CUDA events a staged call records, for the sub-phase timers (any may be null).
struct StagingEvents {
  cudaEvent_t d2h_begin = nullptr, d2h_end = nullptr, h2d_begin = nullptr, h2d_end = nullptr;
};

class DeviceStager {
 public:
  /// A stager for `device`. Chunk size and slot count come from DPL_STAGING_CHUNK_BYTES (default
  /// 4 MiB) and DPL_STAGING_SLOTS (default 4, at least 2).
  explicit DeviceStager(int device);
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  /// In place over n elements of esize bytes at device pointer data: reads them once `producer`'s
  /// work queued so far is done, runs reduce(host_chunk, count) on each chunk in pinned memory
  /// (blocking, on this thread), and writes the results back. Returns when the last reduce has
  /// run; done() then completes once the results are in device memory, and the caller orders
  /// every consumer after it. Returns the seconds spent inside reduce.
  double run(void* data, std::int64_t n, std::size_t esize, cudaStream_t producer,
             const std::function<void(void* host, std::int64_t count)>& reduce, const StagingEvents& events);
  /// Recorded on the host-to-device stream after the last copy of the last run().
  cudaEvent_t done() const { return done_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  void ensure_buffers();

  const int device_;
  std::size_t chunk_bytes_;
  int slots_;
  char* pinned_ = nullptr;  // slots_ * chunk_bytes_
  cudaStream_t d2h_ = nullptr, h2d_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  cudaEvent_t* in_done_ = nullptr;
  cudaEvent_t* out_done_ = nullptr;
};

}  // namespace dpl::comm::detail
