// Stand-ins for the CUDA backend in builds without CUDA: every entry point fails with a clear
// error instead of a link error, and device queries report no GPU.
#include "backend/kernels.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"

namespace dpl {

int cuda_device_count() { return 0; }

namespace backend {

Kernels& cuda_kernels(int index) {
  DPL_FAIL("device cuda:", index, " was requested, but this build of dpl has no CUDA backend "
           "(configure with -DDPL_WITH_CUDA=ON on a machine with the CUDA toolkit)");
}

void copy_between_devices(const Tensor& src, Tensor& dst) {
  DPL_FAIL("copy from ", src.device(), " to ", dst.device(), ": this build of dpl has no CUDA backend");
}

}  // namespace backend
}  // namespace dpl
