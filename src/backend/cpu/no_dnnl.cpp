// Stand-ins for the CPU kernels that live on oneDNN, in builds without it: a call says what is
// missing and how to get it, instead of the dispatcher's bare "no implementation".
#include "dpl/config.hpp"

#if !DPL_WITH_DNNL

#include "backend/kernels.hpp"

namespace dpl::backend {

namespace {

[[noreturn]] void needs_dnnl() {
  DPL_FAIL("conv2d needs oneDNN on the CPU (install libdnnl-dev and reconfigure)");
}
void conv2d_forward_none(const Tensor&, const Tensor&, const Tensor*, const Conv2dParams&, Tensor&) { needs_dnnl(); }
void conv2d_backward_data_none(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { needs_dnnl(); }
void conv2d_backward_weight_none(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { needs_dnnl(); }
void conv2d_backward_bias_none(const Tensor&, float, Tensor&) { needs_dnnl(); }

}  // namespace

DPL_REGISTER_KERNEL(conv2d_forward, kCpu, conv2d_forward_none);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCpu, conv2d_backward_data_none);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCpu, conv2d_backward_weight_none);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCpu, conv2d_backward_bias_none);

}  // namespace dpl::backend

#endif
