// Kernels of the device communicators. Each is one grid-stride pass over the buffer: they are
// bound by memory bandwidth, and fusing the division into the cast back saves a pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/comm_interop.hpp"
#include "comm/nccl/comm_kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::comm::detail {

namespace {

constexpr int kThreads = 256;

// ============================================================================================
// kernels
// ============================================================================================

__global__ void divide_kernel(float* p, std::int64_t n, float d) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] = p[i] / d;  // a division, not a product with 1/d: the host communicators divide too
}

__device__ __forceinline__ void store16(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store16(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ float load16(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load16(const __half* p) { return __half2float(*p); }

template <typename H>
__global__ void to16_kernel(const float* s, H* d, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store16(d + i, s[i]);
}

template <typename H>
__global__ void from16_kernel(const H* s, float* d, std::int64_t n, float div) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    d[i] = load16(s + i) / div;
}

}  // namespace

// ============================================================================================
// launchers
// ============================================================================================

void launch_divide(float* data, std::int64_t n, float divisor, int device, cudaStream_t stream) {
  if (n == 0) return;
  backend::comm_interop::DeviceGuard guard(device);
  divide_kernel<<<backend::comm_interop::grid_for(n, kThreads, device), kThreads, 0, stream>>>(data, n, divisor);
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_cast_to_16bit(const float* src, void* dst, DType dtype, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  backend::comm_interop::DeviceGuard guard(device);
  const unsigned grid = backend::comm_interop::grid_for(n, kThreads, device);
  if (dtype == kBFloat16) {
    to16_kernel<<<grid, kThreads, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  } else {
    DPL_CHECK(dtype == kFloat16, "launch_cast_to_16bit: expected bfloat16 or float16, got ", dtype);
    to16_kernel<<<grid, kThreads, 0, stream>>>(src, static_cast<__half*>(dst), n);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_cast_from_16bit(const void* src, DType dtype, float* dst, std::int64_t n, float divisor, int device,
                            cudaStream_t stream) {
  if (n == 0) return;
  backend::comm_interop::DeviceGuard guard(device);
  const unsigned grid = backend::comm_interop::grid_for(n, kThreads, device);
  if (dtype == kBFloat16) {
    from16_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), dst, n, divisor);
  } else {
    DPL_CHECK(dtype == kFloat16, "launch_cast_from_16bit: expected bfloat16 or float16, got ", dtype);
    from16_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(src), dst, n, divisor);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpl::comm::detail
