// Batch normalisation on cuDNN: the spatial forward-training, inference and backward calls, and
// the fused BN+ReLU and BN+add+ReLU variants (the Ex calls) where cuDNN supports them.
//
// cuDNN 9 marks this API deprecated in favour of its graph API, but it is still supported and is
// what the fused variants exist in; the warnings are silenced for this file only.
//
// Mode: CUDNN_BATCHNORM_SPATIAL_PERSISTENT (faster, cuDNN's fused kernels need it) for
// channels-last training, as PyTorch does; CUDNN_BATCHNORM_SPATIAL otherwise, since the
// persistent kernels can overflow on some inputs and gain most on channels-last data. cuDNN
// keeps the unbiased variance in the running estimate, the convention the kernels promise.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cudnn/norm_pool_descriptors.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cuda_detail::TensorDesc;

bool channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides()[1] == 1 && t.strides()[3] == t.size(1) &&
         t.strides()[2] == t.size(3) * t.size(1) && t.strides()[0] == t.size(2) * t.size(3) * t.size(1);
}

cudnnBatchNormMode_t training_mode(const Tensor& x) {
  return channels_last(x) ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

class ReluDesc : public cuda_detail::Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                                 cudnnDestroyActivationDescriptor> {
 public:
  ReluDesc() { DPL_CUDNN_CHECK(cudnnSetActivationDescriptor(desc_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0)); }
};

void batch_norm_train_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, float momentum,
                           Tensor& running_mean, Tensor& running_var, Tensor& y, Tensor& save_mean,
                           Tensor& save_invstd) {
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  const TensorDesc xd(x), yd(y), sd(weight);
  const float one = 1.f, zero = 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cuda_detail::cudnn_handle(d.device()), training_mode(x), &one, &zero, xd.get(), x.raw_data(), yd.get(),
      y.raw_data(), sd.get(), weight.raw_data(), bias.raw_data(), momentum, running_mean.raw_data(),
      running_var.raw_data(), eps, save_mean.raw_data(), save_invstd.raw_data()));
}

void batch_norm_infer_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, float eps, Tensor& y) {
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
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  // cuDNN takes one layout for x, dy and dx: x's.
  const Tensor g = cuda_detail::with_strides_of(gy, x);
  const bool direct = gx.strides() == x.strides();
  Tensor out = direct ? gx : cuda_detail::empty_with_strides_of(x);
  const TensorDesc xd(x), gyd(g), gxd(out), sd(weight);
  const float one = 1.f, zero = 0.f, b = direct ? beta : 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cuda_detail::cudnn_handle(d.device()), training_mode(x), &one, &b, &one, &zero, xd.get(), x.raw_data(),
      gyd.get(), g.raw_data(), gxd.get(), out.raw_data(), sd.get(), weight.raw_data(), gweight.raw_data(),
      gbias.raw_data(), eps, save_mean.raw_data(), save_invstd.raw_data()));
  if (!direct) cuda_detail::accumulate_into(out, beta, gx);
}

bool batch_norm_act_available_cuda(const Tensor& x) {
  return channels_last(x) && x.dtype() == kFloat16 && x.size(1) % 4 == 0;
}

// A device buffer of at least nbytes, as int32 words so that a Tensor can own it.
Tensor device_bytes(const Tensor& like, std::size_t nbytes) {
  return Tensor::empty({static_cast<std::int64_t>((nbytes + 3) / 4)}, TensorOptions(kInt32, like.device()));
}

Tensor batch_norm_act_train_cuda(bool add, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                                 float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                 Tensor& save_mean, Tensor& save_invstd) {
  DPL_CHECK(batch_norm_act_available_cuda(x), "batch_norm_act_train: needs a channels-last float16 input with a ",
            "multiple of 4 channels, got dtype ", x.dtype(), " and shape ", shape_str(x.shape()));
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  cudnnHandle_t h = cuda_detail::cudnn_handle(d.device());
  const cudnnBatchNormOps_t ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  const TensorDesc xd(x), zd(add ? z : x), yd(y), sd(weight);
  const ReluDesc relu;
  std::size_t work_bytes = 0, reserve_bytes = 0;
  DPL_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, xd.get(), add ? zd.get() : nullptr, yd.get(), sd.get(), relu.get(),
      &work_bytes));
  DPL_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops,
                                                                       relu.get(), xd.get(), &reserve_bytes));
  cuda_detail::Workspace work(d.device(), work_bytes);
  Tensor reserve = device_bytes(x, reserve_bytes);
  const float one = 1.f, zero = 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
      h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &one, &zero, xd.get(), x.raw_data(), add ? zd.get() : nullptr,
      add ? z.raw_data() : nullptr, yd.get(), y.raw_data(), sd.get(), weight.raw_data(), bias.raw_data(), momentum,
      running_mean.raw_data(), running_var.raw_data(), eps, save_mean.raw_data(), save_invstd.raw_data(), relu.get(),
      work.data(), work.size(), reserve_bytes ? reserve.raw_data() : nullptr, reserve_bytes));
  return reserve;
}

void batch_norm_act_backward_cuda(bool add, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& reserve,
                                  const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                                  const Tensor& save_invstd, float eps, Tensor& gx, Tensor& gz, Tensor& gweight,
                                  Tensor& gbias) {
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::DeviceGuard guard(d.device());
  cudnnHandle_t h = cuda_detail::cudnn_handle(d.device());
  const cudnnBatchNormOps_t ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  const Tensor g = cuda_detail::with_strides_of(gy, y);
  const TensorDesc xd(x), yd(y), gyd(g), gxd(gx), gzd(add ? gz : gx), sd(weight);
  const ReluDesc relu;
  std::size_t work_bytes = 0;
  DPL_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, xd.get(), yd.get(), gyd.get(), add ? gzd.get() : nullptr, gxd.get(),
      sd.get(), relu.get(), &work_bytes));
  cuda_detail::Workspace work(d.device(), work_bytes);
  const float one = 1.f, zero = 0.f;
  DPL_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      h, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &one, &zero, &one, &zero, xd.get(), x.raw_data(), yd.get(),
      y.raw_data(), gyd.get(), g.raw_data(), add ? gzd.get() : nullptr, add ? gz.raw_data() : nullptr, gxd.get(),
      gx.raw_data(), sd.get(), weight.raw_data(), bias.raw_data(), gweight.raw_data(), gbias.raw_data(), eps,
      save_mean.raw_data(), save_invstd.raw_data(), relu.get(), work.data(), work.size(),
      reserve.numel() ? reserve.raw_data() : nullptr, reserve.nbytes()));
}

}  // namespace

DPL_REGISTER_KERNEL(batch_norm_train, kCuda, batch_norm_train_cuda);
DPL_REGISTER_KERNEL(batch_norm_infer, kCuda, batch_norm_infer_cuda);
DPL_REGISTER_KERNEL(batch_norm_backward, kCuda, batch_norm_backward_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_available, kCuda, batch_norm_act_available_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_train, kCuda, batch_norm_act_train_cuda);
DPL_REGISTER_KERNEL(batch_norm_act_backward, kCuda, batch_norm_act_backward_cuda);

}  // namespace dpl::backend
