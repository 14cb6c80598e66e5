// 2-D convolution on the CPU through oneDNN.
//
// Image descriptors are built from the tensors' layout (nchw or nhwc), so oneDNN reads and writes
// dpl's memory directly. Weights are described the same way (oihw / ohwi and their grouped forms)
// for NCHW, where oneDNN's GEMM kernels take them as they are. For NHWC, oneDNN's fast kernels
// want blocked weights and would fall back to the reference loop (about 100x slower) on ohwi, so
// the primitive picks the weights' layout (`format_tag::any`) and the small weight tensor is
// reordered into it (or, for the weight gradient, out of it). Creating primitives costs far more
// than a small convolution, so each one, with its reorder, is kept in a map keyed by the whole
// problem (kind, layout, extents, geometry, bias) and reused.
//
// 16-bit tensors take the CPU backend's usual route (src/backend/cpu/cpu.hpp): float32 copies in the
// same layout, the float32 primitive, one rounding of the result. oneDNN's native bfloat16
// kernels need AVX-512 hardware that many hosts lack, and this keeps one path that always works.
// Backward primitives cannot accumulate into their output, so beta 1 adds a float32 result.
#include <algorithm>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu.hpp"
#include "backend/cpu/dnnl/dnnl_runtime.hpp"

namespace dpl::backend::cpu {

namespace {

using cpu_detail::dnnl_call;
using cpu_detail::dnnl_engine;
using cpu_detail::dnnl_stream;
using Tag = dnnl::memory::format_tag;

enum class ConvKind { kForward, kBackwardData, kBackwardWeight };

bool channels_last(const Tensor& image) { return image.is_channels_last() && !image.is_contiguous(); }

// A dense tensor's elements in memory order: the same bytes whatever its layout.
Tensor flat(const Tensor& t) { return Tensor(t.storage(), t.offset(), {t.numel()}, {1}, t.dtype()); }

Tensor empty_float32(const Shape& shape, bool nhwc) {
  return nhwc ? Tensor::empty_channels_last(shape, kFloat32) : Tensor::empty(shape, kFloat32);
}

// t itself when float32, else a float32 copy in the same layout.
Tensor as_float32(const Tensor& t, bool nhwc) {
  if (t.dtype() == kFloat32) return t;
  Tensor f = empty_float32(t.shape(), nhwc);
  Tensor ff = flat(f);
  convert(flat(t), ff);
  return f;
}

// The shapes of one convolution, whichever tensors of it a call holds.
struct ConvShapes {
  Shape x, w, y;
};

dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::desc image_desc(const Shape& s, bool nhwc) {
  return {dims_of(s), dnnl::memory::data_type::f32, nhwc ? Tag::nhwc : Tag::nchw};
}

// Grouped weights are (G, O/G, C/G, KH, KW) to oneDNN; dpl's (O, C/G, KH, KW) is the same memory.
dnnl::memory::desc weight_desc(const Shape& w, std::int64_t groups, bool nhwc) {
  if (groups == 1) return {dims_of(w), dnnl::memory::data_type::f32, nhwc ? Tag::ohwi : Tag::oihw};
  return {{groups, w[0] / groups, w[1], w[2], w[3]}, dnnl::memory::data_type::f32, nhwc ? Tag::gohwi : Tag::goihw};
}

std::string problem_key(ConvKind kind, const ConvShapes& s, const Conv2dParams& p, bool nhwc, bool bias) {
  std::ostringstream k;
  k << static_cast<int>(kind) << (nhwc ? 'L' : 'C') << (bias ? 'b' : '-');
  for (const Shape* sh : {&s.x, &s.w, &s.y})
    for (auto e : *sh) k << ',' << e;
  for (int i = 0; i < 2; ++i) k << ';' << p.stride[i] << ',' << p.padding[i] << ',' << p.dilation[i];
  k << ';' << p.groups;
  return k.str();
}

// A convolution primitive and, when its weights' layout differs from dpl's, the reorder between
// the two (dpl's into the primitive's for forward and backward data, the reverse for the weight
// gradient).
struct ConvPrimitive {
  dnnl::primitive conv;
  dnnl::memory::desc weights;
  std::optional<dnnl::primitive> reorder;
};

ConvPrimitive make_primitive(ConvKind kind, const ConvShapes& s, const Conv2dParams& p, bool nhwc, bool bias) {
  const auto x_md = image_desc(s.x, nhwc), y_md = image_desc(s.y, nhwc);
  const auto user_w_md = weight_desc(s.w, p.groups, nhwc);
  const auto w_md = nhwc ? dnnl::memory::desc(user_w_md.dims(), dnnl::memory::data_type::f32, Tag::any) : user_w_md;
  const dnnl::memory::dims strides{p.stride[0], p.stride[1]};
  const dnnl::memory::dims dilates{p.dilation[0] - 1, p.dilation[1] - 1};  // oneDNN counts the gaps
  const dnnl::memory::dims pad{p.padding[0], p.padding[1]};
  const auto algo = dnnl::algorithm::convolution_direct;
  auto& engine = dnnl_engine();
  using Fwd = dnnl::convolution_forward;
  using Bwd = dnnl::convolution_backward_data;
  using Bww = dnnl::convolution_backward_weights;
  const auto training = dnnl::prop_kind::forward_training;
  ConvPrimitive out;
  if (kind == ConvKind::kForward && bias) {
    const dnnl::memory::desc b_md({s.w[0]}, dnnl::memory::data_type::f32, Tag::a);
    const Fwd::primitive_desc pd(Fwd::desc(training, algo, x_md, w_md, b_md, y_md, strides, dilates, pad, pad), engine);
    out.conv = Fwd(pd);
    out.weights = pd.weights_desc();
  } else {
    const Fwd::primitive_desc fwd(Fwd::desc(training, algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine);
    if (kind == ConvKind::kForward) {
      out.conv = Fwd(fwd);
      out.weights = fwd.weights_desc();
    } else if (kind == ConvKind::kBackwardData) {
      const Bwd::primitive_desc pd(Bwd::desc(algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine, fwd);
      out.conv = Bwd(pd);
      out.weights = pd.weights_desc();
    } else {
      const Bww::primitive_desc pd(Bww::desc(algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine, fwd);
      out.conv = Bww(pd);
      out.weights = pd.diff_weights_desc();
    }
  }
  if (out.weights != user_w_md) {
    const bool into_primitive = kind != ConvKind::kBackwardWeight;
    const auto& from = into_primitive ? user_w_md : out.weights;
    const auto& to = into_primitive ? out.weights : user_w_md;
    out.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, from, engine, to));
  }
  return out;
}

const ConvPrimitive& cached_primitive(ConvKind kind, const ConvShapes& s, const Conv2dParams& p, bool nhwc,
                                      bool bias) {
  static std::mutex mutex;
  static std::unordered_map<std::string, ConvPrimitive> cache;  // entries never move or go away
  const std::string key = problem_key(kind, s, p, nhwc, bias);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_primitive(kind, s, p, nhwc, bias)).first;
  return it->second;
}

dnnl::memory memory_of(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, dnnl_engine(), t.raw_data());
}

// Runs one convolution on float32 tensors: (a, b) are (x, w) forward, (gy, w) for backward data
// and (x, gy) for backward weights; out is y, gx or gw, overwritten.
void execute(ConvKind kind, const ConvShapes& s, const Conv2dParams& p, bool nhwc, const Tensor& a, const Tensor& b,
             const Tensor& bias, const Tensor& out) {
  const ConvPrimitive& prim = cached_primitive(kind, s, p, nhwc, bias.defined());
  const auto x_md = image_desc(s.x, nhwc), y_md = image_desc(s.y, nhwc);
  const dnnl::memory user_w = memory_of(weight_desc(s.w, p.groups, nhwc), kind == ConvKind::kBackwardWeight ? out : b);
  const dnnl::memory w = prim.reorder ? dnnl::memory(prim.weights, dnnl_engine()) : user_w;
  auto& stream = dnnl_stream();
  if (prim.reorder && kind != ConvKind::kBackwardWeight)
    prim.reorder->execute(stream, {{DNNL_ARG_FROM, user_w}, {DNNL_ARG_TO, w}});
  std::unordered_map<int, dnnl::memory> args;
  switch (kind) {
    case ConvKind::kForward:
      args = {{DNNL_ARG_SRC, memory_of(x_md, a)}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, memory_of(y_md, out)}};
      if (bias.defined())
        args.emplace(DNNL_ARG_BIAS, memory_of({{s.w[0]}, dnnl::memory::data_type::f32, Tag::a}, bias));
      break;
    case ConvKind::kBackwardData:
      args = {{DNNL_ARG_DIFF_DST, memory_of(y_md, a)}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, memory_of(x_md, out)}};
      break;
    case ConvKind::kBackwardWeight:
      args = {{DNNL_ARG_SRC, memory_of(x_md, a)}, {DNNL_ARG_DIFF_DST, memory_of(y_md, b)}, {DNNL_ARG_DIFF_WEIGHTS, w}};
      break;
  }
  prim.conv.execute(stream, args);
  if (prim.reorder && kind == ConvKind::kBackwardWeight)
    prim.reorder->execute(stream, {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, user_w}});
  stream.wait();
}

void add_into(const Tensor& src, Tensor& dst) {
  const float* ps = src.data<float>();
  float* pd = dst.data<float>();
  const std::int64_t n = dst.numel();
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) pd[i] += ps[i];
}

// out = beta*out + the convolution result, for any float dtype: float32 work tensors in the
// image's layout, one rounding back for 16-bit outputs.
void run(const char* op, ConvKind kind, const ConvShapes& s, bool nhwc, const Tensor& a, const Tensor& b,
         const Tensor* bias, const Conv2dParams& p, float beta, Tensor& out) {
  if (out.numel() == 0) return;
  dnnl_call(op, [&] {
    const Tensor fa = as_float32(a, nhwc), fb = as_float32(b, nhwc);
    const Tensor fbias = bias != nullptr ? as_float32(*bias, false) : Tensor();
    const bool direct = out.dtype() == kFloat32 && beta == 0.f;
    Tensor result = direct ? out : empty_float32(out.shape(), nhwc);
    execute(kind, s, p, nhwc, fa, fb, fbias, result);
    if (direct) return;
    Tensor flat_out = flat(out);
    Tensor flat_result = flat(result);
    if (out.dtype() == kFloat32) {
      add_into(flat_result, flat_out);  // beta 1
      return;
    }
    if (beta != 0.f) add_into(flat(as_float32(out, nhwc)), flat_result);
    convert(flat_result, flat_out);
  });
}

void conv2d_forward_cpu(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, Tensor& y) {
  run("conv2d", ConvKind::kForward, {x.shape(), w.shape(), y.shape()}, channels_last(x), x, w, bias, p, 0.f, y);
}

void conv2d_backward_data_cpu(const Tensor& gy, const Tensor& w, const Conv2dParams& p, float beta, Tensor& gx) {
  run("conv2d backward (data)", ConvKind::kBackwardData, {gx.shape(), w.shape(), gy.shape()}, channels_last(gx), gy,
      w, nullptr, p, beta, gx);
}

void conv2d_backward_weight_cpu(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta, Tensor& gw) {
  run("conv2d backward (weight)", ConvKind::kBackwardWeight, {x.shape(), gw.shape(), gy.shape()}, channels_last(x),
      x, gy, nullptr, p, beta, gw);
}

// Per channel, a sum in double over N and the pixels, read through gy's strides (either layout).
void conv2d_backward_bias_f32(const Tensor& gy, float beta, Tensor& gb) {
  const float* g = gy.data<float>();
  float* out = gb.data<float>();
  const std::int64_t n = gy.size(0), c = gy.size(1), h = gy.size(2), w = gy.size(3);
  const auto& st = gy.strides();
#pragma omp parallel for if (gy.numel() > kParallelGrain) schedule(static)
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t r = 0; r < h; ++r)
        for (std::int64_t q = 0; q < w; ++q) acc += g[i * st[0] + ch * st[1] + r * st[2] + q * st[3]];
    out[ch] = static_cast<float>(beta == 0.f ? acc : acc + out[ch]);
  }
}

void conv2d_backward_bias_cpu(const Tensor& gy, float beta, Tensor& gb) {
  if (gy.dtype() == kFloat32) return conv2d_backward_bias_f32(gy, beta, gb);
  const Tensor fgy = as_float32(gy, channels_last(gy));
  Tensor fgb = as_float32(gb, false);
  conv2d_backward_bias_f32(fgy, beta, fgb);
  convert(fgb, gb);
}

}  // namespace

DPL_REGISTER_KERNEL(conv2d_forward, kCpu, conv2d_forward_cpu);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCpu, conv2d_backward_data_cpu);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCpu, conv2d_backward_weight_cpu);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCpu, conv2d_backward_bias_cpu);

}  // namespace dpl::backend::cpu
