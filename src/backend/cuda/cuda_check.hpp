#pragma once
// Error checking and device scoping for the CUDA backend. Internal: includes CUDA headers.
//
// Every runtime or cuBLAS call whose failure matters goes through DPL_CUDA_CHECK or
// DPL_CUBLAS_CHECK, so a failure surfaces as dpl::Error naming the call, the error and the
// device instead of as garbage results later.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dpl::backend::cuda_detail {

/// Throws dpl::Error for a failed CUDA runtime call (call text, error name and string, device).
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t err);
/// Throws dpl::Error for a failed cuBLAS call (call text, status name, device).
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status);

/// Makes `device` current for the lifetime of the guard and restores the previous device after.
/// Kernels and streams belong to one device, and the user's thread may have another one current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

/// Number of streaming multiprocessors of device (queried once per device), 1 when the device
/// does not answer.
int sm_count(int device);

/// Compute capability of device as 10 * major + minor (90 for the H100 and H200; queried once per
/// device), 0 when the device does not answer.
int compute_capability(int device);

/// The most shared memory one block of device may use, opting in beyond the default 48 KiB (227 KiB
/// on Hopper; queried once per device), 0 when the device does not answer.
int shared_memory_per_block(int device);

/// How many blocks of `kernel` (a __global__ function) with `threads` threads and `shared_bytes`
/// of dynamic shared memory one multiprocessor of `device` holds at once, at least 1 (CUDA's
/// occupancy calculator, asked once per kernel, block shape and device). A grid of this many
/// blocks per multiprocessor runs in one wave: a fixed grid of 4 or 16 per multiprocessor left a
/// kernel that fits 3 waiting on a last, third-full wave.
int resident_blocks(const void* kernel, int threads, std::size_t shared_bytes, int device);

/// Blocks for a grid-stride loop over n work items: enough to fill the GPU a few times over,
/// never more than n needs.
inline unsigned grid_for(std::int64_t n, int threads, int device) {
  const std::int64_t want = (n + threads - 1) / threads;
  const std::int64_t cap = static_cast<std::int64_t>(sm_count(device)) * 8;
  const std::int64_t g = want < cap ? want : cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

/// True when p is aligned for 16-byte (float4) loads and stores.
inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace dpl::backend::cuda_detail

/// Runs a CUDA runtime call and throws dpl::Error when it fails.
#define DPL_CUDA_CHECK(call)                                                    \
  do {                                                                          \
    const cudaError_t dpl_cuda_err_ = (call);                                   \
    if (dpl_cuda_err_ != cudaSuccess)                                           \
      ::dpl::backend::cuda_detail::throw_cuda_error(#call, dpl_cuda_err_);      \
  } while (0)

/// Runs a cuBLAS call and throws dpl::Error when it fails.
#define DPL_CUBLAS_CHECK(call)                                                  \
  do {                                                                          \
    const cublasStatus_t dpl_cublas_st_ = (call);                               \
    if (dpl_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                \
      ::dpl::backend::cuda_detail::throw_cublas_error(#call, dpl_cublas_st_);   \
  } while (0)
