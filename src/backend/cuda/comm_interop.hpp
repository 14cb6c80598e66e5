#pragma once
// The CUDA backend's interface for communication: the one header under src/backend that the
// communicators (src/comm) may include. Whatever comm needs from the backend is named here, so
// the backend can rework its other headers freely as long as this one keeps its promises.
// Internal: includes the CUDA runtime header.

#include <cuda_runtime.h>

// DPL_CUDA_CHECK(call): runs a CUDA runtime call and throws dpl::Error naming the call, the
// error and the device when it fails.
#include "backend/cuda/cuda_check.hpp"
// launch_cast: float32/bfloat16/float16 conversions fused with a division, on any stream (the
// 16-bit wire of the gradient allreduce, and the division of a mean).
#include "backend/cuda/cast.hpp"

namespace dpl::backend {

/// Defined by the CUDA backend's kernels (declared here so that comm needs no kernel header).
cudaStream_t cuda_stream(int device);

namespace comm_interop {

/// Makes a device current for the guard's lifetime and restores the previous device after:
/// streams, events and NCCL calls belong to one device, and the caller may have another current.
using cuda_detail::DeviceGuard;

/// dst = src / divisor between float32, bfloat16 and float16 on a stream (see cast.hpp).
using cuda_detail::launch_cast;

/// The compute stream of GPU `device`: every kernel and copy dpl queues for that GPU runs on it,
/// in order — or, on a thread inside a SideLane's scope (the overlapped allreduce's worker), that
/// lane's stream, which the lane itself orders against the compute stream. Work that comm queues
/// on its own streams must be ordered against the stream this returns with events: wait for it
/// before reading a buffer, and make it wait before the buffer is used or freed again. Throws
/// dpl::Error for a device that does not exist.
inline cudaStream_t compute_stream(int device) { return cuda_stream(device); }

}  // namespace comm_interop
}  // namespace dpl::backend
