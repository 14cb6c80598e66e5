#pragma once
// Conversions between float32, bfloat16 and float16 on a GPU, host-callable on any stream: the
// cast kernel of the backend runs on them, and so can the 16-bit gradient communication (cast
// to 16 bits before the reduction; cast back fused with the division of the mean). Internal
// header; includes the CUDA runtime header.

#include <cuda_runtime.h>

#include <cstdint>

#include "dpl/core/dtype.hpp"

namespace dpl::backend::cuda_detail {

/// dst[i] = src[i] / divisor for i < n, read as src_dtype and written as dst_dtype (float32,
/// bfloat16 or float16 each), computed in float and rounded once to nearest even; NaN stays NaN.
/// divisor 1 is a plain conversion and divides nothing. A division, not a product with
/// 1/divisor, so that a mean matches the host communicators' bit for bit. src and dst may be the
/// same buffer when the dtypes are equal (in place) and must not overlap otherwise. Queued on
/// `stream`, which belongs to `device`; the caller's current device is left as it was. Throws
/// dpl::Error for another dtype, and when the launch fails.
void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n, float divisor,
                 int device, cudaStream_t stream);

}  // namespace dpl::backend::cuda_detail
