// Batch normalisation on oneDNN's batch_normalization primitive, with scale and shift always
// passed (the ops pass ones and zeros without an affine transform), so one primitive per shape,
// layout and direction serves both. oneDNN reports the batch variance; the saved statistics are
// the mean and 1/sqrt(var + eps), the form the CUDA backend keeps, and backward turns the latter
// back into a variance.
#include <cmath>
#include <unordered_map>

#include "backend/cpu/dnnl/image_memory.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {
using cpu_detail::dnnl_call;
using cpu_detail::dnnl_engine;
using cpu_detail::dnnl_stream;
using cpu_detail::float_desc;
using cpu_detail::float_memory;

const dnnl::normalization_flags kScaleShift = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

// Primitives per direction, layout and eps, per thread (oneDNN primitives are not shared across
// threads here, like the streams).
struct Entry {
  dnnl::batch_normalization_forward::primitive_desc fwd_pd;
  dnnl::primitive prim;
};

Entry& entry(int direction, const Tensor& x, float eps) {
  thread_local std::unordered_map<std::string, Entry> cache;
  const std::string key = std::to_string(direction) + ":" + std::to_string(eps) + ":" + cpu_detail::layout_key(x);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const dnnl::memory::desc md = float_desc(x);
  const bool training = direction != 1;
  const auto flags = training ? kScaleShift : kScaleShift | dnnl::normalization_flags::use_global_stats;
  const dnnl::batch_normalization_forward::desc fd(
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, md, eps, flags);
  dnnl::batch_normalization_forward::primitive_desc fpd(fd, dnnl_engine());
  if (direction != 2) return cache.emplace(key, Entry{fpd, dnnl::batch_normalization_forward(fpd)}).first->second;
  const dnnl::batch_normalization_backward::desc bd(dnnl::prop_kind::backward, md, md, eps, kScaleShift);
  const dnnl::batch_normalization_backward::primitive_desc bpd(bd, dnnl_engine(), fpd);
  return cache.emplace(key, Entry{fpd, dnnl::batch_normalization_backward(bpd)}).first->second;
}

// y in x's float32 format: y itself when it already is that.
Tensor float_output(const Tensor& y, const Tensor& xf) {
  return y.dtype() == kFloat32 && cpu_detail::is_channels_last(y) == cpu_detail::is_channels_last(xf)
             ? y
             : cpu_detail::empty_float_in_format(y.shape(), xf);
}

void batch_norm_train_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, float momentum,
                          Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y, Tensor& save_mean,
                          Tensor& save_invstd) {
  dnnl_call("batch_norm", [&] {
    const Tensor xf = cpu_detail::widened(x);
    Tensor yf = float_output(y, xf);
    Tensor var = Tensor::empty({x.size(1)}, kFloat32);
    entry(0, xf, eps).prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, float_memory(xf)},
                                                   {DNNL_ARG_DST, float_memory(yf)},
                                                   {DNNL_ARG_SCALE, float_memory(weight)},
                                                   {DNNL_ARG_SHIFT, float_memory(bias)},
                                                   {DNNL_ARG_MEAN, float_memory(save_mean)},
                                                   {DNNL_ARG_VARIANCE, float_memory(var)}});
    dnnl_stream().wait();
    cpu_detail::store(yf, 0.f, y);
    const double m = static_cast<double>(x.size(0) * x.size(2) * x.size(3));
    const float* mean = save_mean.data<float>();
    const float* v = var.data<float>();
    float* rm = running_mean.data<float>();
    float* rv = running_var.data<float>();
    float* invstd = save_invstd.data<float>();
    for (std::int64_t c = 0; c < x.size(1); ++c) {
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[c]) + eps));
      rm[c] = (1.f - momentum) * rm[c] + momentum * mean[c];
      rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * (v[c] * m / (m - 1.0)));
    }
  });
  if (batches.numel() > 0) increment_count(batches);
}

void batch_norm_infer_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                          const Tensor& running_var, float eps, Tensor& y) {
  dnnl_call("batch_norm", [&] {
    const Tensor xf = cpu_detail::widened(x);
    Tensor yf = float_output(y, xf);
    entry(1, xf, eps).prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, float_memory(xf)},
                                                   {DNNL_ARG_DST, float_memory(yf)},
                                                   {DNNL_ARG_SCALE, float_memory(weight)},
                                                   {DNNL_ARG_SHIFT, float_memory(bias)},
                                                   {DNNL_ARG_MEAN, float_memory(running_mean)},
                                                   {DNNL_ARG_VARIANCE, float_memory(running_var)}});
    dnnl_stream().wait();
    cpu_detail::store(yf, 0.f, y);
  });
}

void batch_norm_backward_cpu(const Tensor& x, const Tensor& gy, const Tensor& weight, const Tensor& save_mean,
                             const Tensor& save_invstd, float eps, float beta, Tensor& gx, Tensor& gweight,
                             Tensor& gbias) {
  DPL_CHECK(x.dtype() == gy.dtype() && x.dtype() == gx.dtype(), "batch_norm backward: expected x, gy and gx of one ",
            "dtype, got ", x.dtype(), ", ", gy.dtype(), " and ", gx.dtype());
  dnnl_call("batch_norm backward", [&] {
    // oneDNN takes one layout for the data and its gradients: x's.
    const Tensor xf = cpu_detail::widened(x);
    const Tensor gyf = cpu_detail::float_in_format_of(gy, xf);
    Tensor gxf = beta == 0.f ? float_output(gx, xf) : cpu_detail::empty_float_in_format(gx.shape(), xf);
    Tensor var = Tensor::empty({x.size(1)}, kFloat32);
    const float* invstd = save_invstd.data<float>();
    float* v = var.data<float>();
    for (std::int64_t c = 0; c < x.size(1); ++c)
      v[c] = static_cast<float>(1.0 / (static_cast<double>(invstd[c]) * invstd[c]) - eps);
    // oneDNN 2.6 asks for a shift argument whenever the primitive uses one, though the backward
    // of plain batch norm never reads it; the weight's memory has the right description.
    entry(2, xf, eps).prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, float_memory(xf)},
                                                   {DNNL_ARG_DIFF_DST, float_memory(gyf)},
                                                   {DNNL_ARG_SCALE, float_memory(weight)},
                                                   {DNNL_ARG_SHIFT, float_memory(weight)},
                                                   {DNNL_ARG_MEAN, float_memory(save_mean)},
                                                   {DNNL_ARG_VARIANCE, float_memory(var)},
                                                   {DNNL_ARG_DIFF_SRC, float_memory(gxf)},
                                                   {DNNL_ARG_DIFF_SCALE, float_memory(gweight)},
                                                   {DNNL_ARG_DIFF_SHIFT, float_memory(gbias)}});
    dnnl_stream().wait();
    cpu_detail::store(gxf, beta, gx);
  });
}

// oneDNN's fused batch norm + ReLU has no add variant and its backward needs its own workspace;
// the ops compose the plain kernels instead.
bool batch_norm_act_available_cpu(const Tensor&) { return false; }

}  // namespace

DPL_REGISTER_KERNEL(batch_norm_act_available, kCpu, batch_norm_act_available_cpu);
DPL_REGISTER_KERNEL(batch_norm_train, kCpu, batch_norm_train_cpu);
DPL_REGISTER_KERNEL(batch_norm_infer, kCpu, batch_norm_infer_cpu);
DPL_REGISTER_KERNEL(batch_norm_backward, kCpu, batch_norm_backward_cpu);

}  // namespace dpl::backend
