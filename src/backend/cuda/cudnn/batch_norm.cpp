// Batch normalisation on the GPU: channels-last images go to dpl's own kernels
// (backend/cuda/batch_norm_nhwc.hpp, which says why), fused with ReLU and with a residual add and
// ReLU for every float dtype; NCHW images go to cuDNN's spatial forward-training, inference and
// backward calls.
//
// cuDNN 9 marks this API deprecated in favour of its graph API, but it is still supported; the
// warnings are silenced for this file only. cuDNN keeps the unbiased variance in the running
// estimate, the convention the kernels promise.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "backend/cuda/batch_norm_nhwc.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cudnn/norm_pool_descriptors.hpp"
#include "backend/cuda/max_pool_nhwc.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::TensorDesc;

bool channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides()[1] == 1 && t.strides()[3] == t.size(1) &&
         t.strides()[2] == t.size(3) * t.size(1) && t.strides()[0] == t.size(2) * t.size(3) * t.size(1);
}

// cuDNN's calls (NCHW images) take float32 per-channel vectors for every image dtype; only the
// channels-last kernels read 16-bit parameters in place.
void check_float32_params(const char* op, const Tensor& a, const Tensor& b) {
  DPL_CHECK(a.dtype() == kFloat32 && b.dtype() == kFloat32, op,
            ": NCHW images take float32 weight, bias and their gradients (channels-last images take any float ",
            "dtype), got ", a.dtype(), " and ", b.dtype());
}

void batch_norm_train_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, float momentum,
                           Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y, Tensor& save_mean,
                           Tensor& save_invstd) {
  if (channels_last(x) && y.strides() == x.strides()) {
    cuda_detail::batch_norm_nhwc_train(x, nullptr, false, weight, bias, eps, momentum, running_mean, running_var,
                                       batches, y, save_mean, save_invstd);
    return;
  }
  check_float32_params("batch_norm", weight, bias);
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const TensorDesc xd(x), yd(y), sd(weight);
  const float one = 1.f, zero = 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cuda_detail::cudnn_handle(d.device()), CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.get(), x.raw_data(), yd.get(),
      y.raw_data(), sd.get(), weight.raw_data(), bias.raw_data(), momentum, running_mean.raw_data(),
      running_var.raw_data(), eps, save_mean.raw_data(), save_invstd.raw_data()));
  if (batches.numel() > 0) increment_count(batches);  // cuDNN's call has no counter
}

void batch_norm_infer_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, float eps, Tensor& y) {
  check_float32_params("batch_norm (evaluation)", weight, bias);
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const TensorDesc xd(x), yd(y), sd(weight);
  const float one = 1.f, zero = 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cuda_detail::cudnn_handle(d.device()), CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.get(), x.raw_data(), yd.get(),
      y.raw_data(), sd.get(), weight.raw_data(), bias.raw_data(), running_mean.raw_data(), running_var.raw_data(),
      eps));
}

void batch_norm_backward_cuda(const Tensor& x, const Tensor& gy, const Tensor& weight, const Tensor& save_mean,
                              const Tensor& save_invstd, float eps, float beta, Tensor& gx, Tensor& gweight,
                              Tensor& gbias) {
  DPL_CHECK(x.dtype() == gy.dtype() && x.dtype() == gx.dtype(), "batch_norm backward: expected x, gy and gx of one ",
            "dtype, got ", x.dtype(), ", ", gy.dtype(), " and ", gx.dtype());
  // Both paths take one layout for x, dy and dx: x's.
  const Tensor g = cuda_detail::with_strides_of(gy, x);
  const bool direct = gx.strides() == x.strides();
  Tensor out = direct ? gx : cuda_detail::empty_with_strides_of(x);
  if (channels_last(x)) {
    cuda_detail::batch_norm_nhwc_backward(x, nullptr, nullptr, g, weight, save_mean, save_invstd, direct ? beta : 0.f, out,
                                          nullptr, 0.f, gweight, gbias);
    if (!direct) cuda_detail::accumulate_into(out, beta, gx);
    return;
  }
  check_float32_params("batch_norm backward", weight, gweight);
  check_float32_params("batch_norm backward", weight, gbias);
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const TensorDesc xd(x), gyd(g), gxd(out), sd(weight);
  const float one = 1.f, zero = 0.f, b = direct ? beta : 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cuda_detail::cudnn_handle(d.device()), CUDNN_BATCHNORM_SPATIAL, &one, &b, &one, &zero, xd.get(), x.raw_data(),
      gyd.get(), g.raw_data(), gxd.get(), out.raw_data(), sd.get(), weight.raw_data(), gweight.raw_data(),
      gbias.raw_data(), eps, save_mean.raw_data(), save_invstd.raw_data()));
  if (!direct) cuda_detail::accumulate_into(out, beta, gx);
}

bool batch_norm_act_available_cuda(const Tensor& x) { return channels_last(x); }

Tensor batch_norm_act_train_cuda(bool add, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                                 float eps, float momentum, Tensor& running_mean, Tensor& running_var,
                                 Tensor& batches, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  DPL_CHECK(batch_norm_act_available_cuda(x) && y.strides() == x.strides() && (!add || z.strides() == x.strides()),
            "batch_norm_act_train: needs channels-last x, y and z of one layout, got shape ", shape_str(x.shape()),
            " strides ", shape_str(x.strides()));
  cuda_detail::batch_norm_nhwc_train(x, add ? &z : nullptr, true, weight, bias, eps, momentum, running_mean,
                                     running_var, batches, y, save_mean, save_invstd);
  // Nothing is reserved: the backward pass reads y for the ReLU's mask, or recomputes it from x.
  return Tensor::empty({0}, TensorOptions(kInt32, x.device()));
}

Tensor batch_norm_train_from_sums_cuda(bool relu, bool add, const Tensor& x, const Tensor& z, const Tensor& sum,
                                    const Tensor& sum_of_squares, const Tensor& weight, const Tensor& bias, float eps,
                                    float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                                    Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  DPL_CHECK(channels_last(x) && y.strides() == x.strides() && (!add || z.strides() == x.strides()),
            "batch_norm_train_from_sums: needs channels-last x, y and z of one layout, got shape ",
            shape_str(x.shape()), " strides ", shape_str(x.strides()));
  DPL_CHECK(relu || !add, "batch_norm_train_from_sums: a residual add is only fused with the ReLU after it");
  cuda_detail::batch_norm_nhwc_train_from_sums(x, add ? &z : nullptr, relu, sum, sum_of_squares, weight, bias, eps,
                                               momentum, running_mean, running_var, batches, y, save_mean,
                                               save_invstd);
  return Tensor::empty({0}, TensorOptions(kInt32, x.device()));  // as batch_norm_act_train_cuda
}

void batch_norm_act_backward_cuda(bool add, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& /*reserve*/,
                                  const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                                  const Tensor& save_invstd, float /*eps*/, Tensor& gx, Tensor& gz, float param_beta,
                                  Tensor& gweight, Tensor& gbias) {
  const Tensor g = cuda_detail::with_strides_of(gy, x);
  // Without a residual the ReLU's mask is recomputed from x rather than read from y.
  cuda_detail::batch_norm_nhwc_backward(x, add ? &y : nullptr, add ? nullptr : &bias, g, weight, save_mean,
                                        save_invstd, 0.f, gx, add ? &gz : nullptr, param_beta, gweight, gbias);
}

void batch_norm_backward_from_sums_cuda(const Tensor& x, const Tensor& g, const Tensor& sum_g, const Tensor& sum_gx,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        Tensor& gx, float param_beta, Tensor& gweight, Tensor& gbias) {
  DPL_CHECK(channels_last(x) && g.strides() == x.strides() && gx.strides() == x.strides(),
            "batch_norm_backward_from_sums: needs channels-last x, g and gx of one layout, got shape ",
            shape_str(x.shape()), " strides ", shape_str(x.strides()));
  cuda_detail::batch_norm_nhwc_backward_from_sums(x, g, sum_g, sum_gx, weight, save_mean, save_invstd, 0.f, gx,
                                                  param_beta, gweight, gbias);
}

bool batch_norm_relu_max_pool_available_cuda(const Tensor& x, const Pool2dParams& p) {
  return channels_last(x) && cuda_detail::max_pool_nhwc_fits(x, p);
}

Tensor batch_norm_relu_max_pool_train_cuda(const Pool2dParams& p, const Tensor& x, const Tensor& sum,
                                           const Tensor& sum_of_squares, const Tensor& weight, const Tensor& bias,
                                           float eps, float momentum, Tensor& running_mean, Tensor& running_var,
                                           Tensor& batches, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  DPL_CHECK(batch_norm_relu_max_pool_available_cuda(x, p) && cuda_detail::max_pool_nhwc_fits(y, p),
            "batch_norm_relu_max_pool_train: needs channels-last x and y, got shapes ", shape_str(x.shape()), " and ",
            shape_str(y.shape()), ", strides ", shape_str(x.strides()), " and ", shape_str(y.strides()));
  Tensor argmax(Storage::allocate(static_cast<std::size_t>(y.numel()), y.device()), 0, y.shape(), y.strides(),
                kUInt8);
  const Tensor sums[2] = {sum, sum_of_squares};
  cuda_detail::batch_norm_relu_max_pool_nhwc_train(p, x, sum.numel() > 0 && sum_of_squares.numel() > 0 ? sums : nullptr,
                                                   weight, bias, eps, momentum, running_mean, running_var, batches,
                                                   y, argmax, save_mean, save_invstd);
  return argmax;
}

void batch_norm_relu_max_pool_backward_cuda(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                                            const Tensor& argmax, const Tensor& gy, const Tensor& weight,
                                            const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd,
                                            Tensor& gx, float param_beta, Tensor& gweight, Tensor& gbias) {
  DPL_CHECK(gx.strides() == x.strides() && argmax.strides() == y.strides() && argmax.dtype() == kUInt8,
            "batch_norm_relu_max_pool_backward: needs gx in x's strides and the forward's winners, got gx strides ",
            shape_str(gx.strides()), " for x strides ", shape_str(x.strides()));
  const Tensor g = cuda_detail::with_strides_of(gy, y);
  cuda_detail::batch_norm_relu_max_pool_nhwc_backward(p, x, y, argmax, g, weight, bias, save_mean, save_invstd, 0.f,
                                                      gx, param_beta, gweight, gbias);
}

}  // namespace

DPL_REGISTER_KERNEL(batch_norm_backward_from_sums, kCuda, batch_norm_backward_from_sums_cuda);
DPL_REGISTER_KERNEL(batch_norm_train, kCuda, batch_norm_train_cuda);
DPL_REGISTER_KERNEL(batch_norm_infer, kCuda, batch_norm_infer_cuda);
DPL_REGISTER_KERNEL(batch_norm_backward, kCuda, batch_norm_backward_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_available, kCuda, batch_norm_act_available_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_train, kCuda, batch_norm_act_train_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_backward, kCuda, batch_norm_act_backward_cuda);
DPL_REGISTER_KERNEL(batch_norm_train_from_sums, kCuda, batch_norm_train_from_sums_cuda);
DPL_REGISTER_KERNEL(batch_norm_relu_max_pool_available, kCuda, batch_norm_relu_max_pool_available_cuda);
DPL_REGISTER_KERNEL(batch_norm_relu_max_pool_train, kCuda, batch_norm_relu_max_pool_train_cuda);
DPL_REGISTER_KERNEL(batch_norm_relu_max_pool_backward, kCuda, batch_norm_relu_max_pool_backward_cuda);

}  // namespace dpl::backend
