// Stand-ins for the convolution kernels in builds without the library that implements them
// (oneDNN on the CPU, cuDNN on the GPU): a call says what is missing and how to get it, instead
// of the dispatcher's bare "no implementation". Builds without CUDA at all keep the dispatcher's
// own message, which says that the build has no CUDA backend.
#include "dpl/config.hpp"

#if !DPL_WITH_DNNL || (DPL_WITH_CUDA && !DPL_WITH_CUDNN)

#include "backend/kernels.hpp"

namespace dpl::backend {

namespace {

constexpr char kNeedsDnnl[] = "conv2d needs oneDNN on the CPU (install libdnnl-dev and reconfigure)";
constexpr char kNeedsCudnn[] = "conv2d needs cuDNN on the GPU (install cuDNN under the CUDA toolkit and reconfigure)";

// The four kernels, each throwing `Message`.
template <const char* Message>
struct StandIns {
  static void forward(const Tensor&, const Tensor&, const Tensor*, const Conv2dParams&, Tensor&) { DPL_FAIL(Message); }
  static void backward_data(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { DPL_FAIL(Message); }
  static void backward_weight(const Tensor&, const Tensor&, const Conv2dParams&, float, Tensor&) { DPL_FAIL(Message); }
  static void backward_bias(const Tensor&, float, Tensor&) { DPL_FAIL(Message); }
};

}  // namespace

#if !DPL_WITH_DNNL
DPL_REGISTER_KERNEL(conv2d_forward, kCpu, StandIns<kNeedsDnnl>::forward);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCpu, StandIns<kNeedsDnnl>::backward_data);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCpu, StandIns<kNeedsDnnl>::backward_weight);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCpu, StandIns<kNeedsDnnl>::backward_bias);
#endif
#if DPL_WITH_CUDA && !DPL_WITH_CUDNN
DPL_REGISTER_KERNEL(conv2d_forward, kCuda, StandIns<kNeedsCudnn>::forward);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCuda, StandIns<kNeedsCudnn>::backward_data);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCuda, StandIns<kNeedsCudnn>::backward_weight);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCuda, StandIns<kNeedsCudnn>::backward_bias);
#endif

}  // namespace dpl::backend

#endif
