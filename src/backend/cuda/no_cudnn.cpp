// Stand-ins for the CUDA kernels that live on cuDNN, in CUDA builds without it: a call says what
// is missing and how to get it, instead of the dispatcher's bare "no implementation".
#include "dpl/config.hpp"

#if !DPL_WITH_CUDNN

#include "backend/kernels.hpp"

namespace dpl::backend {

namespace {

[[noreturn]] void needs_cudnn() {
  DPL_FAIL("conv2d needs cuDNN on the GPU (install cuDNN under the CUDA toolkit and reconfigure)");
}
void conv2d_forward_none(const Tensor&, const Tensor&, const Tensor*, const Conv2dParams&, Tensor&) { needs_cudnn(); }
void conv2d_backward_data_none(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { needs_cudnn(); }
void conv2d_backward_weight_none(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { needs_cudnn(); }
void conv2d_backward_bias_none(const Tensor&, float, Tensor&) { needs_cudnn(); }

}  // namespace

DPL_REGISTER_KERNEL(conv2d_forward, kCuda, conv2d_forward_none);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCuda, conv2d_backward_data_none);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCuda, conv2d_backward_weight_none);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCuda, conv2d_backward_bias_none);

}  // namespace dpl::backend

#endif
