// conv2d, conv_transpose2d, the 2-D poolings (max, average, global average, adaptive average),
// interpolate and dropout2d over (N, C, H, W) images.
#include <cmath>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

// --- conv2d -------------------------------------------------------------------------------------
// The kernels take every operand in one memory format, the input's (Tensor::memory_format).
// Operands in the other format are converted here; in a channels-last network that is only the
// incoming gradient and the input gradient, whose buffers autograd allocates contiguous.
namespace {

class Conv2dNode final : public Node {
 public:
  Tensor x, w;
  backend::Conv2dParams p;
  MemoryFormat format = MemoryFormat::kContiguous;
  // Offered by the batch norm that produced x (OffersOutputGradReductions).
  std::shared_ptr<OutputGradReductions> input_reductions;
  const char* name() const override { return "conv2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, format);
    if (t[0].needed() && !completes_with_reductions(g, t[0]))
      write_in(t[0], format, [&](float beta, Tensor& gx) { backend::conv2d_backward_data(g, w, p, beta, gx); });
    if (t[1].needed())
      write_in(t[1], format, [&](float beta, Tensor& gw) { backend::conv2d_backward_weight(x, g, p, beta, gw); });
    if (t.size() > 2 && t[2].needed()) backend::conv2d_backward_bias(g, t[2].beta, *t[2].tensor);
  }
  void release() override {
    x = w = Tensor();
    input_reductions.reset();
  }

 private:
  // Where this gradient completes x's (the last contribution, added to what is there) and the
  // batch norm that produced x asked for its reductions: the data gradient, the mask and the
  // reductions in one kernel, where the device has one for the problem. False: nothing written.
  bool completes_with_reductions(const Tensor& g, GradTarget& target) {
    if (!input_reductions || input_reductions->filled || !target.completes || target.beta != 1.f ||
        !has_format(*target.tensor, format))
      return false;
    OutputGradReductions& r = *input_reductions;
    const TensorOptions stats(kFloat32, g.device());
    r.sum_g = Tensor::empty({x.size(1)}, stats);
    r.sum_gx = Tensor::empty({x.size(1)}, stats);
    r.filled = backend::conv2d_backward_data_masked_sums(g, w, p, r.y, r.x, r.mean, *target.tensor, r.sum_g,
                                                         r.sum_gx);
    if (r.filled) count_output_grad_reductions_filled();
    return r.filled;
  }
};

void check_conv2d_geometry(const char* op, Conv2dPair stride, Conv2dPair padding, Conv2dPair dilation,
                           std::int64_t groups) {
  for (int i = 0; i < 2; ++i) {
    DPL_CHECK(stride[i] >= 1, op, ": expected strides >= 1, got (", stride[0], ", ", stride[1], ")");
    DPL_CHECK(padding[i] >= 0, op, ": expected paddings >= 0, got (", padding[0], ", ", padding[1], ")");
    DPL_CHECK(dilation[i] >= 1, op, ": expected dilations >= 1, got (", dilation[0], ", ", dilation[1], ")");
  }
  DPL_CHECK(groups >= 1, op, ": expected groups >= 1, got ", groups);
}

// The output shape of conv2d, with the channel and group checks that it rests on.
Shape conv2d_output_shape(const char* op, const Shape& xs, const Shape& ws, Conv2dPair stride, Conv2dPair padding,
                          Conv2dPair dilation, std::int64_t groups) {
  const std::int64_t c = xs[1], out_c = ws[0];
  DPL_CHECK(c % groups == 0, op, ": expected input channels divisible by groups=", groups, ", got ", c,
            " channels (input shape ", shape_str(xs), ")");
  DPL_CHECK(out_c % groups == 0, op, ": expected output channels divisible by groups=", groups, ", got ", out_c,
            " (weight shape ", shape_str(ws), ")");
  DPL_CHECK(ws[1] == c / groups, op, ": expected a weight of shape (", out_c, ", ", c / groups, ", kh, kw) for ", c,
            " input channels in ", groups, " group(s), got ", shape_str(ws));
  Shape ys{xs[0], out_c, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const std::int64_t extent = xs[2 + i] + 2 * padding[i] - dilation[i] * (ws[2 + i] - 1) - 1;
    ys[2 + i] = extent < 0 ? 0 : extent / stride[i] + 1;
    DPL_CHECK(ys[2 + i] >= 1, op, ": the output would have no ", i == 0 ? "rows" : "columns", ": input ",
              shape_str(xs), " with padding ", padding[i], " is smaller than the dilated kernel (",
              dilation[i] * (ws[2 + i] - 1) + 1, "); expected an output extent of at least 1");
  }
  return ys;
}

class InterpolateNode final : public Node {
 public:
  backend::Upsample2dParams p;
  const char* name() const override { return "interpolate"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::upsample2d_backward(p, g, beta, gx); });
  }
};

// PyTorch's source step along one axis (area_pixel_compute_scale): (in - 1) / (out - 1) with
// align_corners, else 1 / scale_factor when one was given, else in / out.
float source_step(std::int64_t in, std::int64_t out, std::optional<double> scale_factor, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  if (scale_factor) return static_cast<float>(1.0 / *scale_factor);
  return static_cast<float>(in) / static_cast<float>(out);
}

// Checks the optional bias against the output's channels and returns the kernels' geometry.
backend::Conv2dParams conv2d_params(const char* op, const Variable& x, const Variable& bias, std::int64_t out_channels,
                                    Conv2dPair stride, Conv2dPair padding, Conv2dPair dilation, std::int64_t groups) {
  if (bias.defined()) {
    check_operands(op, {{x, "an input"}, {bias, "a bias"}});
    DPL_CHECK(bias.data().dim() == 1 && bias.data().size(0) == out_channels, op, ": expected a bias of shape (",
              out_channels, ",), got ", shape_str(bias.shape()));
  }
  backend::Conv2dParams p;
  for (int i = 0; i < 2; ++i) {
    p.stride[i] = stride[i];
    p.padding[i] = padding[i];
    p.dilation[i] = dilation[i];
  }
  p.groups = groups;
  return p;
}

class AdaptiveAvgPoolNode final : public Node {
 public:
  const char* name() const override { return "adaptive_avg_pool2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::adaptive_avg_pool2d_backward(g, beta, gx); });
  }
};

}  // namespace

namespace {

// conv2d, and with `sums` conv2d_with_sums: the fused kernel where the device has one.
Variable conv2d_impl(const char* op, const Variable& x, const Variable& weight, const Variable& bias,
                     Conv2dPair stride, Conv2dPair padding, Conv2dPair dilation, std::int64_t groups,
                     ChannelSums* sums) {
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"},
                      {weight, "a weight", 4, " (out_channels, in_channels/groups, kh, kw)"}});
  check_conv2d_geometry(op, stride, padding, dilation, groups);
  const Shape ys = conv2d_output_shape(op, x.shape(), weight.shape(), stride, padding, dilation, groups);
  const backend::Conv2dParams p = conv2d_params(op, x, bias, ys[1], stride, padding, dilation, groups);
  const MemoryFormat format = x.data().memory_format();
  const Tensor tx = in_format(x.data(), format), tw = in_format(weight.data(), format);
  const Tensor tb = bias.defined() ? dense(bias.data()) : Tensor();
  Tensor out = empty_in(ys, format, tx);
  bool fused = false;
  if (sums != nullptr) {
    *sums = ChannelSums{};
    if (!tx.device().is_cpu() && backend::conv2d_forward_sums.has(backend::kCuda)) {
      const TensorOptions stats(kFloat32, tx.device());
      Tensor sum = Tensor::empty({ys[1]}, stats), squares = Tensor::empty({ys[1]}, stats);
      fused = backend::conv2d_forward_sums(tx, tw, p, out, sum, squares);
      if (fused) *sums = ChannelSums{sum, squares};
    }
  }
  if (!fused) backend::conv2d_forward(tx, tw, bias.defined() ? &tb : nullptr, p, out);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(out);
  auto node = std::make_shared<Conv2dNode>();
  node->x = tx;
  node->w = tw;
  node->p = p;
  node->format = format;
  if (!bias.defined() && !tx.device().is_cpu() && backend::conv2d_backward_data_masked_sums.has(backend::kCuda))
    if (const auto* offers = dynamic_cast<const OffersOutputGradReductions*>(x.creator().get()))
      node->input_reductions = offers->output_grad_reductions();
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(out, node);
}

}  // namespace

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, Conv2dPair stride,
                Conv2dPair padding, Conv2dPair dilation, std::int64_t groups) {
  return conv2d_impl("conv2d", x, weight, bias, stride, padding, dilation, groups, nullptr);
}

Variable conv2d_with_sums(const Variable& x, const Variable& weight, ChannelSums& sums, Conv2dPair stride,
                          Conv2dPair padding, Conv2dPair dilation, std::int64_t groups) {
  return conv2d_impl("conv2d_with_sums", x, weight, Variable(), stride, padding, dilation, groups, &sums);
}

// --- conv_transpose2d ----------------------------------------------------------------------------
// conv_transpose2d(x, w) is the adjoint of conv2d(., w) in its input, so each of its three passes
// is one of conv2d's kernels with the roles of the images swapped: its forward is conv2d's
// backward-data with x as the output gradient, its input gradient conv2d's forward of gy, its
// weight gradient conv2d's weight gradient with gy as the input and x as the output gradient.
namespace {

class ConvTranspose2dNode final : public Node {
 public:
  Tensor x, w;
  backend::Conv2dParams p;
  MemoryFormat format = MemoryFormat::kContiguous;
  const char* name() const override { return "conv_transpose2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, format);
    if (t[0].needed()) {
      // conv2d_forward writes without beta: accumulate through a temporary.
      GradTarget& gx = t[0];
      if (gx.beta == 0.f && has_format(*gx.tensor, format)) {
        backend::conv2d_forward(g, w, nullptr, p, *gx.tensor);
      } else {
        Tensor tmp = empty_in(gx.tensor->shape(), format, *gx.tensor);
        backend::conv2d_forward(g, w, nullptr, p, tmp);
        add_into(tmp, gx);
      }
    }
    if (t[1].needed())
      write_in(t[1], format, [&](float beta, Tensor& gw) { backend::conv2d_backward_weight(g, x, p, beta, gw); });
  }
  void release() override { x = w = Tensor(); }
};

}  // namespace

Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias, Conv2dPair stride,
                          Conv2dPair padding, Conv2dPair output_padding, std::int64_t groups, Conv2dPair dilation) {
  const char* op = "conv_transpose2d";
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"},
                      {weight, "a weight", 4, " (in_channels, out_channels/groups, kh, kw)"}});
  check_conv2d_geometry(op, stride, padding, dilation, groups);
  const Shape xs = x.shape(), ws = weight.shape();
  for (int i = 0; i < 2; ++i)
    DPL_CHECK(output_padding[i] >= 0 && output_padding[i] < stride[i], op,
              ": expected 0 <= output_padding < stride, got output_padding (", output_padding[0], ", ",
              output_padding[1], ") with stride (", stride[0], ", ", stride[1], ")");
  DPL_CHECK(xs[1] % groups == 0, op, ": expected input channels divisible by groups=", groups, ", got ", xs[1],
            " channels (input shape ", shape_str(xs), ")");
  DPL_CHECK(ws[0] == xs[1], op, ": expected a weight of shape (", xs[1], ", out_channels/groups, kh, kw) for ", xs[1],
            " input channels, got ", shape_str(ws));
  Shape ys{xs[0], ws[1] * groups, 0, 0};
  for (int i = 0; i < 2; ++i) {
    ys[2 + i] = (xs[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ws[2 + i] - 1) + output_padding[i] + 1;
    DPL_CHECK(ys[2 + i] >= 1, op, ": the output would have no ", i == 0 ? "rows" : "columns", ": input ",
              shape_str(xs), ", weight ", shape_str(ws), " and padding ", padding[i], " give ", ys[2 + i],
              "; expected an output extent of at least 1");
  }
  DPL_CHECK(xs[2] >= 1 && xs[3] >= 1, op, ": expected H and W of at least 1, got shape ", shape_str(xs));
  const backend::Conv2dParams p = conv2d_params(op, x, bias, ys[1], stride, padding, dilation, groups);
  const MemoryFormat format = x.data().memory_format();
  const Tensor tx = in_format(x.data(), format), tw = in_format(weight.data(), format);
  Tensor out = empty_in(ys, format, tx);
  backend::conv2d_backward_data(tx, tw, p, 0.f, out);
  Variable y(out);
  if (any_requires_grad({&x, &weight})) {
    auto node = std::make_shared<ConvTranspose2dNode>();
    node->x = tx;
    node->w = tw;
    node->p = p;
    node->format = format;
    node->set_inputs({x, weight});
    y = Variable::make_result(out, node);
  }
  // The bias is an ordinary broadcast add (conv2d's kernels add a bias only in their forward). A
  // channels-last output, viewed as (N, H, W, C), is contiguous with the bias along its rows, so
  // the add keeps the format.
  if (!bias.defined()) return y;
  if (format == MemoryFormat::kChannelsLast) return permute(add(permute(y, {0, 2, 3, 1}), bias), {0, 3, 1, 2});
  return add(y, reshape(bias, {1, ys[1], 1, 1}));
}

// --- pooling ------------------------------------------------------------------------------------
namespace {

class Pool2dNode final : public Node {
 public:
  backend::PoolKind kind;
  backend::Pool2dParams p;
  Tensor x, saved;
  bool global = false;
  const char* name() const override {
    return global ? "global_avg_pool2d" : kind == backend::PoolKind::kMax ? "max_pool2d" : "avg_pool2d";
  }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed() || t[0].tensor->numel() == 0) return;
    // The global op's (N, C) gradient is the (N, C, 1, 1) pooling's, in either memory format.
    const Tensor g = global ? dense(gy).reshape({gy.size(0), gy.size(1), 1, 1}) : gy;
    backend::pool2d_backward(kind, p, x, saved, g, t[0].beta, *t[0].tensor);
  }
  void release() override { x = saved = Tensor(); }
};

Variable pool2d(const char* op, backend::PoolKind kind, const Variable& x, Size2d kernel, Size2d stride,
                Size2d padding, bool global = false) {
  const Tensor tx = image_input(op, x);
  const PoolWindow window = pool_window(op, tx, kernel, stride, padding);
  const backend::Pool2dParams& p = window.params;
  const Shape& out_shape = window.out_shape;
  Tensor y = empty_in_format_of(out_shape, tx);
  Tensor saved = tx.numel() > 0 ? backend::pool2d(kind, p, tx, y) : y;
  // (N, C, 1, 1) has one element per (n, c) in both memory formats, at n*C + c.
  Tensor out = global ? Tensor(y.storage(), y.offset(), {y.size(0), y.size(1)}, {y.size(1), 1}, y.dtype()) : y;
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<Pool2dNode>();
  node->kind = kind;
  node->p = p;
  // The winners' indices say all that backward needs: a zero-element stand-in keeps the graph
  // from holding x for them (kernels.hpp).
  node->x = saved.dtype() != kUInt8 ? tx : Tensor::empty({0}, TensorOptions(tx.dtype(), tx.device()));
  node->saved = saved;
  node->global = global;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace

Variable max_pool2d(const Variable& x, Size2d kernel, Size2d stride, Size2d padding) {
  return pool2d("max_pool2d", backend::PoolKind::kMax, x, kernel, stride, padding);
}

Variable avg_pool2d(const Variable& x, Size2d kernel, Size2d stride, Size2d padding, bool count_include_pad) {
  return pool2d("avg_pool2d", count_include_pad ? backend::PoolKind::kAvgIncludePad : backend::PoolKind::kAvgExcludePad,
                x, kernel, stride, padding);
}

Variable global_avg_pool2d(const Variable& x) {
  const char* op = "global_avg_pool2d";
  const Tensor tx = image_input(op, x);
  DPL_CHECK(tx.size(2) >= 1 && tx.size(3) >= 1, op, ": expected H and W of at least 1, got shape ",
            shape_str(tx.shape()));
  return pool2d(op, backend::PoolKind::kAvgIncludePad, x, Size2d(tx.size(2), tx.size(3)), Size2d(1), Size2d(0), true);
}

Variable adaptive_avg_pool2d(const Variable& x, Size2d output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"}});
  const Tensor tx = dense(x.data());
  DPL_CHECK(tx.size(2) >= 1 && tx.size(3) >= 1, op, ": expected H and W of at least 1, got shape ",
            shape_str(tx.shape()));
  DPL_CHECK(output_size.h >= 1 && output_size.w >= 1, op, ": expected an output size of at least 1x1, got ",
            output_size.h, "x", output_size.w);
  Tensor y = empty_on({tx.size(0), tx.size(1), output_size.h, output_size.w}, tx);
  backend::adaptive_avg_pool2d(tx, y);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<AdaptiveAvgPoolNode>();
  node->set_inputs({x});
  return Variable::make_result(y, node);
}

Variable interpolate(const Variable& x, std::optional<Size2d> size, std::optional<Scale2d> scale_factor,
                     InterpolateMode mode, bool align_corners) {
  const char* op = "interpolate";
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"}});
  const Tensor tx = dense(x.data());
  const std::int64_t h = tx.size(2), w = tx.size(3);
  DPL_CHECK(h >= 1 && w >= 1, op, ": expected H and W of at least 1, got shape ", shape_str(tx.shape()));
  DPL_CHECK(size.has_value() != scale_factor.has_value(), op,
            ": expected exactly one of size and scale_factor, got ", size ? "both" : "neither");
  DPL_CHECK(!align_corners || mode == InterpolateMode::kBilinear, op,
            ": align_corners requires the bilinear mode, got align_corners=true with mode nearest");
  std::int64_t ho = 0, wo = 0;
  if (size) {
    ho = size->h;
    wo = size->w;
    DPL_CHECK(ho >= 1 && wo >= 1, op, ": expected an output size of at least 1x1, got ", ho, "x", wo);
  } else {
    DPL_CHECK(scale_factor->h > 0 && scale_factor->w > 0 && std::isfinite(scale_factor->h) &&
                  std::isfinite(scale_factor->w),
              op, ": expected positive finite scale factors, got ", scale_factor->h, "x", scale_factor->w);
    ho = static_cast<std::int64_t>(std::floor(static_cast<double>(h) * scale_factor->h));
    wo = static_cast<std::int64_t>(std::floor(static_cast<double>(w) * scale_factor->w));
    DPL_CHECK(ho >= 1 && wo >= 1, op, ": scale factors ", scale_factor->h, "x", scale_factor->w, " give input ",
              shape_str(tx.shape()), " an empty output (", ho, "x", wo, "); expected at least 1x1");
  }
  backend::Upsample2dParams p;
  p.mode = mode == InterpolateMode::kNearest ? backend::UpsampleMode::kNearest : backend::UpsampleMode::kBilinear;
  p.align_corners = align_corners;
  const std::optional<double> sh = scale_factor ? std::optional<double>(scale_factor->h) : std::nullopt;
  const std::optional<double> sw = scale_factor ? std::optional<double>(scale_factor->w) : std::nullopt;
  p.scale_h = source_step(h, ho, sh, align_corners);
  p.scale_w = source_step(w, wo, sw, align_corners);
  Tensor y = empty_on({tx.size(0), tx.size(1), ho, wo}, tx);
  backend::upsample2d(p, tx, y);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<InterpolateNode>();
  node->p = p;
  node->set_inputs({x});
  return Variable::make_result(y, node);
}

Variable dropout2d(const Variable& x, float p, Generator& gen, bool training) {
  const char* op = "dropout2d";
  DPL_CHECK(p >= 0.f && p < 1.f, op, ": expected a drop probability p in [0, 1), got ", p);
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"}});
  if (!training || p == 0.f) return x;
  const Tensor& tx = x.data();
  const Variable ones(Tensor::ones({tx.size(0), tx.size(1), 1, 1}, TensorOptions(tx.dtype(), tx.device())));
  return mul(x, dropout(ones, p, gen, true));
}

}  // namespace dpl
