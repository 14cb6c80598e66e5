// 2-D pooling on the GPU. Channels-last max pooling runs dpl's own kernels
// (backend/cuda/max_pool_nhwc.hpp says why), which save the winners' indices as uint8; the rest
// runs on cuDNN, whose backward recomputes the arg-max from x and y, so the forward pass saves y.
// cuDNN describes every tensor by its own strides, so NCHW and channels-last tensors go through
// without layout copies.
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cudnn/norm_pool_descriptors.hpp"
#include "backend/cuda/max_pool_nhwc.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::TensorDesc;

class PoolingDesc : public cuda_detail::Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                                    cudnnDestroyPoolingDescriptor> {
 public:
  PoolingDesc(PoolKind kind, const Pool2dParams& p) {
    const cudnnPoolingMode_t mode = kind == PoolKind::kMax              ? CUDNN_POOLING_MAX
                                    : kind == PoolKind::kAvgIncludePad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                                       : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    const auto i = [](std::int64_t v) { return static_cast<int>(v); };
    DPL_CUDNN_CHECK(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_NOT_PROPAGATE_NAN, i(p.kernel_h), i(p.kernel_w),
                                                i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w)));
  }
};

Tensor pool2d_cuda(PoolKind kind, const Pool2dParams& p, const Tensor& x, Tensor& y) {
  if (kind == PoolKind::kMax && cuda_detail::max_pool_nhwc_fits(x, p) && cuda_detail::max_pool_nhwc_fits(y, p)) {
    Tensor argmax(Storage::allocate(static_cast<std::size_t>(y.numel()), y.device()), 0, y.shape(), y.strides(),
                  kUInt8);
    cuda_detail::max_pool_nhwc(p, x, y, argmax);
    return argmax;
  }
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const PoolingDesc pd(kind, p);
  const TensorDesc xd(x), yd(y);
  const float alpha = 1.f, beta = 0.f;
  DPL_CUDNN_CHECK(cudnnPoolingForward(cuda_detail::cudnn_handle(d.device()), pd.get(), &alpha, xd.get(), x.raw_data(),
                                      &beta, yd.get(), y.raw_data()));
  return y;
}

void pool2d_backward_cuda(PoolKind kind, const Pool2dParams& p, const Tensor& x, const Tensor& saved, const Tensor& gy,
                          float beta, Tensor& gx) {
  if (saved.dtype() == kUInt8) {  // the winners' indices of max_pool_nhwc; x is not read
    DPL_CHECK(kind == PoolKind::kMax && gy.dtype() == gx.dtype() && is_float_dtype(gx.dtype()),
              "pool2d_backward: expected gy and gx of one float dtype, got ", gy.dtype(), " and ", gx.dtype());
    cuda_detail::DeviceGuard guard(cuda_device_of(gx).device());
    const Tensor g = cuda_detail::with_strides_of(gy, saved);
    const bool direct = cuda_detail::max_pool_nhwc_fits(gx, p);  // packed channels-last, as the kernel writes
    Tensor out = direct ? gx : Tensor::empty_channels_last(gx.shape(), TensorOptions(gx.dtype(), gx.device()));
    cuda_detail::max_pool_nhwc_backward(p, saved, g, direct ? beta : 0.f, out);
    if (!direct) cuda_detail::accumulate_into(out, beta, gx);
    return;
  }
  DPL_CHECK(is_float_dtype(x.dtype()) && x.dtype() == gy.dtype() && x.dtype() == gx.dtype() &&
                x.dtype() == saved.dtype(),
            "pool2d_backward: expected x, y, gy and gx of one float dtype, got ", x.dtype(), ", ", saved.dtype(), ", ",
            gy.dtype(), " and ", gx.dtype());
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const PoolingDesc pd(kind, p);
  // cuDNN wants dy laid out as y and dx as x; the autograd buffers are NCHW whatever x's format.
  const Tensor g = cuda_detail::with_strides_of(gy, saved);
  const bool direct = gx.strides() == x.strides();
  Tensor out = direct ? gx : cuda_detail::empty_with_strides_of(x);
  const TensorDesc xd(x), yd(saved), gyd(g), gxd(out);
  const float alpha = 1.f, b = direct ? beta : 0.f;
  // beta 0 makes cuDNN ignore gx's old contents, as the kernel contract wants.
  DPL_CUDNN_CHECK(cudnnPoolingBackward(cuda_detail::cudnn_handle(d.device()), pd.get(), &alpha, yd.get(),
                                       saved.raw_data(), gyd.get(), g.raw_data(), xd.get(), x.raw_data(), &b,
                                       gxd.get(), out.raw_data()));
  if (!direct) cuda_detail::accumulate_into(out, beta, gx);
}

}  // namespace

DPL_REGISTER_KERNEL(pool2d, kCuda, pool2d_cuda);
DPL_REGISTER_KERNEL(pool2d_backward, kCuda, pool2d_backward_cuda);

}  // namespace dpl::backend
