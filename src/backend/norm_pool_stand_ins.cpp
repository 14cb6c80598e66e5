// Stand-ins for the normalisation and pooling kernels on a backend built without its library
// (oneDNN on the CPU, cuDNN on the GPU): each call says what is missing and how to get it,
// instead of reporting no implementation.
#include "dpl/config.hpp"

#if !DPL_WITH_DNNL || (DPL_WITH_CUDA && !DPL_WITH_CUDNN)
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {
namespace {

enum class Library { kDnnl, kCudnn };

template <Library L>
[[noreturn]] void missing(const char* op) {
  if (L == Library::kDnnl) DPL_FAIL(op, " needs oneDNN on the CPU (install libdnnl-dev and reconfigure)");
  DPL_FAIL(op, " needs cuDNN on the GPU (install cuDNN and reconfigure with DPL_WITH_CUDNN=ON)");
}

template <Library L>
bool batch_norm_act_available_missing(const Tensor&) {
  return false;
}
template <Library L>
void batch_norm_train_missing(const Tensor&, const Tensor&, const Tensor&, float, float, Tensor&, Tensor&, Tensor&,
                              Tensor&, Tensor&, Tensor&) {
  missing<L>("batch_norm");
}
template <Library L>
void batch_norm_infer_missing(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                              Tensor&) {
  missing<L>("batch_norm");
}
template <Library L>
void batch_norm_backward_missing(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                                 float, Tensor&, Tensor&, Tensor&) {
  missing<L>("batch_norm");
}
template <Library L>
Tensor pool2d_missing(PoolKind, const Pool2dParams&, const Tensor&, Tensor&) {
  missing<L>("pooling");
}
template <Library L>
void pool2d_backward_missing(PoolKind, const Pool2dParams&, const Tensor&, const Tensor&, const Tensor&, float,
                             Tensor&) {
  missing<L>("pooling");
}

}  // namespace

#define DPL_REGISTER_NORM_POOL_STANDINS(which, library)                                   \
  DPL_REGISTER_KERNEL(batch_norm_act_available, which, batch_norm_act_available_missing<library>); \
  DPL_REGISTER_KERNEL(batch_norm_train, which, batch_norm_train_missing<library>);         \
  DPL_REGISTER_KERNEL(batch_norm_infer, which, batch_norm_infer_missing<library>);         \
  DPL_REGISTER_KERNEL(batch_norm_backward, which, batch_norm_backward_missing<library>);   \
  DPL_REGISTER_KERNEL(pool2d, which, pool2d_missing<library>);                             \
  DPL_REGISTER_KERNEL(pool2d_backward, which, pool2d_backward_missing<library>)

#if !DPL_WITH_DNNL
DPL_REGISTER_NORM_POOL_STANDINS(kCpu, Library::kDnnl);
#endif
#if DPL_WITH_CUDA && !DPL_WITH_CUDNN
DPL_REGISTER_NORM_POOL_STANDINS(kCuda, Library::kCudnn);
#endif

}  // namespace dpl::backend
#endif
