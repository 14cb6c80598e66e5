#include "backend/kernels.hpp"

#include "backend/cpu/cpu_kernels.hpp"

namespace dpl::backend {

Kernels& cpu_kernels() {
  static CpuKernels k;
  return k;
}

Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu_kernels();
  return cuda_kernels(device.index);
}

}  // namespace dpl::backend
