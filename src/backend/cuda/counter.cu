// BatchNorm2d's batch counter, incremented on the GPU so that counting never waits for it. A plain
// kernel of its own, not a part of the cuDNN files: the counter works in builds without cuDNN.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {

__global__ void increment_kernel(std::int64_t* counter) { *counter += 1; }

void increment_count_cuda(Tensor& counter) {
  DPL_CHECK(counter.dtype() == kInt64 && counter.numel() == 1, "increment_count: expected one int64 element, got ",
            counter.dtype(), " of shape ", shape_str(counter.shape()));
  CudaDevice& d = cuda_device_of(counter);
  cuda_detail::DeviceGuard guard(d.device());
  increment_kernel<<<1, 1, 0, d.stream()>>>(counter.data<std::int64_t>());
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

DPL_REGISTER_KERNEL(increment_count, kCuda, increment_count_cuda);

}  // namespace dpl::backend
