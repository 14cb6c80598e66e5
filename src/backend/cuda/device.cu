// CUDA device queries. Any runtime error (no driver, driver too old, no device) reads as
// "no GPU" so that GPU code paths skip cleanly on machines without one.
#include <cuda_runtime.h>

#include "backend/kernels.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"

namespace dpl {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls start clean
      return 0;
    }
    return n;
  }();
  return count;
}

namespace backend {

Kernels& cuda_kernels(int index) {
  DPL_FAIL("device cuda:", index, " was requested; this version of dpl runs its kernels on the CPU only");
}

void copy_between_devices(const Tensor& src, Tensor& dst) {
  DPL_FAIL("copy from ", src.device(), " to ", dst.device(), ": this version of dpl runs on the CPU only");
}

}  // namespace backend
}  // namespace dpl
