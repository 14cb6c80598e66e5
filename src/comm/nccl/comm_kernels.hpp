#pragma once
// Kernels of the device communicators: the division of a mean and the casts of the 16-bit
// gradient communication. Launchers take the stream to run on and check the launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "dpl/core/dtype.hpp"

namespace dpl::comm::detail {

/// data[i] /= divisor for n floats on `device`, queued on stream.
void launch_divide(float* data, std::int64_t n, float divisor, int device, cudaStream_t stream);
/// dst (n elements of dtype kBFloat16 or kFloat16) = src rounded to nearest even.
void launch_cast_to_16bit(const float* src, void* dst, DType dtype, std::int64_t n, int device, cudaStream_t stream);
/// dst[i] = float(src[i]) / divisor: the way back, fused with the division of the mean.
void launch_cast_from_16bit(const void* src, DType dtype, float* dst, std::int64_t n, float divisor, int device,
                            cudaStream_t stream);

}  // namespace dpl::comm::detail
