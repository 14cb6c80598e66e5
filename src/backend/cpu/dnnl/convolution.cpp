// 2-D convolution on the CPU through oneDNN.
//
// Channels-last images are described as they are (nhwc), so oneDNN reads and writes dpl's memory
// directly; for NCHW images the primitive picks its own (blocked) layout and the images are
// reordered into it and the result out of it, because oneDNN's plain-NCHW route is a GEMM
// fallback well behind its blocked kernels. Weights always take the primitive's layout
// (`format_tag::any`): on plain ohwi the fast kernels would fall back to the reference loop
// (about 100x slower); the small weight tensor is reordered into it (or, for the weight
// gradient, out of it). Creating primitives costs far more
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

bool channels_last(const Tensor& image) { return image.memory_format() == MemoryFormat::kChannelsLast; }

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

// One operand of a primitive: the layout dpl holds it in, the layout the primitive wants, and
// when they differ the reorder between them (into the primitive's layout for an input, out of it
// for the output).
struct Operand {
  dnnl::memory::desc user, prim;
  std::optional<dnnl::primitive> reorder;
};

Operand operand(const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool input) {
  Operand o{user, prim, std::nullopt};
  if (prim != user) {
    auto& engine = dnnl_engine();
    o.reorder = dnnl::reorder(input ? dnnl::reorder::primitive_desc(engine, user, engine, prim)
                                    : dnnl::reorder::primitive_desc(engine, prim, engine, user));
  }
  return o;
}

// A convolution primitive with its three operands x, w, y (for the backward kinds: gx or gy, and
// gw, in those places).
struct ConvPrimitive {
  dnnl::primitive conv;
  Operand x, w, y;
};

ConvPrimitive make_primitive(ConvKind kind, const ConvShapes& s, const Conv2dParams& p, bool nhwc, bool bias) {
  const auto user_x = image_desc(s.x, nhwc), user_y = image_desc(s.y, nhwc);
  const auto user_w = weight_desc(s.w, p.groups, nhwc);
  const auto any = [](const dnnl::memory::desc& md) {
    return dnnl::memory::desc(md.dims(), dnnl::memory::data_type::f32, Tag::any);
  };
  // Images stay in dpl's memory for NHWC, which oneDNN's fast kernels read directly; for NCHW
  // the primitive picks blocked layouts and the images are reordered around it (as PyTorch does),
  // since the plain-NCHW route is a GEMM fallback that ran at 0.6x of PyTorch.
  const auto x_md = nhwc ? user_x : any(user_x), y_md = nhwc ? user_y : any(user_y);
  const auto w_md = any(user_w);
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
  if (kind == ConvKind::kForward) {
    const dnnl::memory::desc b_md({s.w[0]}, dnnl::memory::data_type::f32, Tag::a);
    const Fwd::primitive_desc pd =
        bias ? Fwd::primitive_desc(Fwd::desc(training, algo, x_md, w_md, b_md, y_md, strides, dilates, pad, pad), engine)
             : Fwd::primitive_desc(Fwd::desc(training, algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine);
    out.conv = Fwd(pd);
    out.x = operand(user_x, pd.src_desc(), true);
    out.w = operand(user_w, pd.weights_desc(), true);
    out.y = operand(user_y, pd.dst_desc(), false);
    return out;
  }
  const Fwd::primitive_desc fwd(Fwd::desc(training, algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine);
  if (kind == ConvKind::kBackwardData) {
    const Bwd::primitive_desc pd(Bwd::desc(algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine, fwd);
    out.conv = Bwd(pd);
    out.x = operand(user_x, pd.diff_src_desc(), false);
    out.w = operand(user_w, pd.weights_desc(), true);
    out.y = operand(user_y, pd.diff_dst_desc(), true);
  } else {
    const Bww::primitive_desc pd(Bww::desc(algo, x_md, w_md, y_md, strides, dilates, pad, pad), engine, fwd);
    out.conv = Bww(pd);
    out.x = operand(user_x, pd.src_desc(), true);
    out.w = operand(user_w, pd.diff_weights_desc(), false);
    out.y = operand(user_y, pd.diff_dst_desc(), true);
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
  auto& stream = dnnl_stream();
  // The primitive's memory for an operand: dpl's tensor itself, or a buffer in the primitive's
  // layout (filled from the tensor for an input).
  const auto bind = [&](const Operand& op, const Tensor& t, bool input) {
    const dnnl::memory user = memory_of(op.user, t);
    if (!op.reorder) return user;
    dnnl::memory m(op.prim, dnnl_engine());
    if (input) op.reorder->execute(stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
    return m;
  };
  const Operand* out_op = nullptr;
  std::unordered_map<int, dnnl::memory> args;
  switch (kind) {
    case ConvKind::kForward:
      out_op = &prim.y;
      args = {{DNNL_ARG_SRC, bind(prim.x, a, true)}, {DNNL_ARG_WEIGHTS, bind(prim.w, b, true)},
              {DNNL_ARG_DST, bind(prim.y, out, false)}};
      if (bias.defined())
        args.emplace(DNNL_ARG_BIAS, memory_of({{s.w[0]}, dnnl::memory::data_type::f32, Tag::a}, bias));
      break;
    case ConvKind::kBackwardData:
      out_op = &prim.x;
      args = {{DNNL_ARG_DIFF_DST, bind(prim.y, a, true)}, {DNNL_ARG_WEIGHTS, bind(prim.w, b, true)},
              {DNNL_ARG_DIFF_SRC, bind(prim.x, out, false)}};
      break;
    case ConvKind::kBackwardWeight:
      out_op = &prim.w;
      args = {{DNNL_ARG_SRC, bind(prim.x, a, true)}, {DNNL_ARG_DIFF_DST, bind(prim.y, b, true)},
              {DNNL_ARG_DIFF_WEIGHTS, bind(prim.w, out, false)}};
      break;
  }
  const int out_arg = kind == ConvKind::kForward        ? DNNL_ARG_DST
                      : kind == ConvKind::kBackwardData ? DNNL_ARG_DIFF_SRC
                                                        : DNNL_ARG_DIFF_WEIGHTS;
  prim.conv.execute(stream, args);
  if (out_op->reorder)
    out_op->reorder->execute(stream, {{DNNL_ARG_FROM, args.at(out_arg)}, {DNNL_ARG_TO, memory_of(out_op->user, out)}});
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
