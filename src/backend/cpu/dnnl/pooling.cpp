// 2-D max and average pooling on oneDNN's pooling primitive. Max pooling keeps oneDNN's arg-max
// workspace from the forward pass, so backward routes each gradient without searching the window
// again. Primitives are cached per thread by kind, window, layouts.
#include <algorithm>
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

dnnl::algorithm algorithm_of(PoolKind kind) {
  switch (kind) {
    case PoolKind::kMax: return dnnl::algorithm::pooling_max;
    case PoolKind::kAvgIncludePad: return dnnl::algorithm::pooling_avg_include_padding;
    default: return dnnl::algorithm::pooling_avg_exclude_padding;
  }
}

std::string window_key(PoolKind kind, const Pool2dParams& p) {
  return std::to_string(static_cast<int>(kind)) + ":" + std::to_string(p.kernel_h) + "," + std::to_string(p.kernel_w) +
         "," + std::to_string(p.stride_h) + "," + std::to_string(p.stride_w) + "," + std::to_string(p.pad_h) + "," +
         std::to_string(p.pad_w);
}

// The right padding for oneDNN, which requires out = (in + pad_l + pad_r - k) / stride + 1 (floor
// division): what the last window reaches past the input, never negative (a window that stops
// short of the input's end, as floor division allows, needs none).
dnnl::memory::dims pad_right(const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  return {std::max<std::int64_t>((y.size(2) - 1) * p.stride_h + p.kernel_h - x.size(2) - p.pad_h, 0),
          std::max<std::int64_t>((y.size(3) - 1) * p.stride_w + p.kernel_w - x.size(3) - p.pad_w, 0)};
}

struct ForwardEntry {
  dnnl::pooling_forward::primitive_desc pd;
  dnnl::pooling_forward prim;
};

// Forward primitive of x -> y, both float32 in x's memory format.
ForwardEntry& forward_entry(PoolKind kind, const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  thread_local std::unordered_map<std::string, ForwardEntry> cache;
  const std::string key = window_key(kind, p) + cpu_detail::layout_key(x) + cpu_detail::layout_key(y);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training, algorithm_of(kind), float_desc(x),
                                      float_desc(y), {p.stride_h, p.stride_w}, {p.kernel_h, p.kernel_w},
                                      {p.pad_h, p.pad_w}, pad_right(p, x, y));
  dnnl::pooling_forward::primitive_desc pd(d, dnnl_engine());
  return cache.emplace(key, ForwardEntry{pd, dnnl::pooling_forward(pd)}).first->second;
}

Tensor pool2d_cpu(PoolKind kind, const Pool2dParams& p, const Tensor& x, Tensor& y) {
  Tensor saved;
  dnnl_call(kind == PoolKind::kMax ? "max_pool2d" : "avg_pool2d", [&] {
    const Tensor xf = cpu_detail::widened(x);
    Tensor yf = y.dtype() == kFloat32 && cpu_detail::is_channels_last(y) == cpu_detail::is_channels_last(xf)
                    ? y
                    : cpu_detail::empty_float_in_format(y.shape(), xf);
    ForwardEntry& e = forward_entry(kind, p, xf, yf);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, float_memory(xf)}, {DNNL_ARG_DST, float_memory(yf)}};
    if (kind == PoolKind::kMax) {
      const dnnl::memory::desc wd = e.pd.workspace_desc();
      // Held as int32 words so that the tensor machinery can own and move it.
      saved = Tensor::empty({static_cast<std::int64_t>((wd.get_size() + 3) / 4)}, TensorOptions(kInt32));
      args.emplace(DNNL_ARG_WORKSPACE, dnnl::memory(wd, dnnl_engine(), saved.raw_data()));
    }
    e.prim.execute(dnnl_stream(), args);
    dnnl_stream().wait();
    cpu_detail::store(yf, 0.f, y);
  });
  // Average pooling needs nothing saved; y stands in so that the saved tensor is always defined.
  return saved.defined() ? saved : y;
}

void pool2d_backward_cpu(PoolKind kind, const Pool2dParams& p, const Tensor& x, const Tensor& saved, const Tensor& gy,
                         float beta, Tensor& gx) {
  DPL_CHECK(is_float_dtype(x.dtype()) && x.dtype() == gy.dtype() && x.dtype() == gx.dtype(),
            "pool2d_backward: expected x, gy and gx of one float dtype, got ", x.dtype(), ", ", gy.dtype(), " and ",
            gx.dtype());
  dnnl_call(kind == PoolKind::kMax ? "max_pool2d backward" : "avg_pool2d backward", [&] {
    // Backward runs in x's memory format, the one the forward primitive (and its workspace) used.
    const Tensor xf = cpu_detail::widened(x);
    const Tensor gyx = cpu_detail::float_in_format_of(gy, xf);
    ForwardEntry& fe = forward_entry(kind, p, xf, gyx);
    Tensor gxf = cpu_detail::empty_float_like(xf);
    const dnnl::pooling_backward::desc d(algorithm_of(kind), float_desc(gxf), float_desc(gyx), {p.stride_h, p.stride_w},
                                         {p.kernel_h, p.kernel_w}, {p.pad_h, p.pad_w}, pad_right(p, x, gy));
    thread_local std::unordered_map<std::string, dnnl::pooling_backward> cache;
    const std::string key = window_key(kind, p) + cpu_detail::layout_key(xf) + cpu_detail::layout_key(gyx);
    auto it = cache.find(key);
    if (it == cache.end())
      it = cache.emplace(key, dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(d, dnnl_engine(), fe.pd)))
               .first;
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, float_memory(gyx)},
                                               {DNNL_ARG_DIFF_SRC, float_memory(gxf)}};
    if (kind == PoolKind::kMax)
      args.emplace(DNNL_ARG_WORKSPACE, dnnl::memory(fe.pd.workspace_desc(), dnnl_engine(), saved.raw_data()));
    it->second.execute(dnnl_stream(), args);
    dnnl_stream().wait();
    cpu_detail::store(gxf, beta, gx);
  });
}

}  // namespace

DPL_REGISTER_KERNEL(pool2d, kCpu, pool2d_cpu);
DPL_REGISTER_KERNEL(pool2d_backward, kCpu, pool2d_backward_cpu);

}  // namespace dpl::backend
