// The differentiable ops: checks, forward through the device's kernels, and a Node per op that
// writes input gradients with the kernels' beta (write or accumulate) convention.
#include "dpl/autograd/ops.hpp"

#include <algorithm>

#include "backend/kernels.hpp"
#include "dpl/autograd/node.hpp"

namespace dpl {

namespace {
using backend::BinaryOp;
using backend::Broadcast;

Tensor empty_like(const Tensor& t) { return Tensor::empty_like(t); }
Tensor empty_on(const Shape& s, const Tensor& like) {
  return Tensor::empty(s, TensorOptions(like.dtype(), like.device()));
}

void check_defined(const char* op, const Variable& v, const char* what) {
  DPL_CHECK(v.defined(), op, ": the ", what, " is undefined");
}
void check_float(const char* op, const Tensor& t, const char* what) {
  DPL_CHECK(is_float_dtype(t.dtype()), op, ": expected ", what, " of dtype float32, bfloat16 or float16, got ",
            t.dtype());
}
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  DPL_CHECK(a.dtype() == b.dtype(), op, ": expected operands of one dtype, got ", a.dtype(), " and ", b.dtype());
}
void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DPL_CHECK(a.device() == b.device(), op, ": expected operands on one device, got ", a.device(), " and ",
            b.device());
}
void check_rank(const char* op, const Tensor& t, std::int64_t rank, const char* what) {
  DPL_CHECK(t.dim() == rank, op, ": expected ", what, " with ", rank, " dimensions, got shape ", shape_str(t.shape()));
}
// Ops that index rows (matmul, softmax, reshape) read their inputs as flat row-major arrays.
Tensor dense(const Tensor& t) { return t.contiguous(); }

// --- memory formats ---------------------------------------------------------------------------
// A dense tensor is stored contiguous (row-major, NCHW for images) or channels-last (NHWC).
// Elementwise ops work in memory order, so they keep their input's format: a channels-last
// network stays channels-last without copies. Autograd gives every gradient buffer the format of
// its variable's data (Tensor::empty_like), so a node's incoming gradient has the format of the
// node's output. Where an op computed in another format than an input's (operands in two
// formats, a row broadcast, reshape), that input's gradient goes through write_in.
enum class Format { kContiguous, kChannelsLast };

Format format_of(const Tensor& t) {
  return t.is_channels_last() && !t.is_contiguous() ? Format::kChannelsLast : Format::kContiguous;
}
bool has_format(const Tensor& t, Format f) {
  return f == Format::kChannelsLast ? t.is_channels_last() : t.is_contiguous();
}
Tensor in_format(const Tensor& t, Format f) {
  return f == Format::kChannelsLast ? t.to_channels_last() : t.contiguous();
}
// t itself when it is dense in either format, else a contiguous copy.
Tensor dense_keep(const Tensor& t) { return in_format(t, format_of(t)); }
Tensor empty_in(const Shape& shape, Format f, const Tensor& like) {
  const TensorOptions o(like.dtype(), like.device());
  return f == Format::kChannelsLast ? Tensor::empty_channels_last(shape, o) : Tensor::empty(shape, o);
}
// A dense tensor's elements in memory order (the same bytes whatever its format).
Tensor flat(const Tensor& t) { return Tensor(t.storage(), t.offset(), {t.numel()}, {1}, t.dtype()); }

// target = beta*target + g for g of the target's shape, whatever the two formats: one pass when
// they match, a strided copy when the target is overwritten, else g brought to the target's
// format first.
void add_into(const Tensor& g, GradTarget& target) {
  Tensor& buffer = *target.tensor;
  if (g.strides() == buffer.strides()) {
    backend::axpby(1.f, g, target.beta, buffer);
    return;
  }
  if (target.beta == 0.f) {
    buffer.copy_(g);
    return;
  }
  Tensor flat_buffer = flat(buffer);
  backend::axpby(1.f, flat(in_format(g, format_of(buffer))), 1.f, flat_buffer);
}

// Runs `kernel(beta, out)`, a kernel that writes in format f, into target's buffer when the
// buffer has that format, else into a temporary that add_into then brings to the buffer.
template <typename Kernel>
void write_in(GradTarget& target, Format f, Kernel&& kernel) {
  Tensor& buffer = *target.tensor;
  if (has_format(buffer, f)) {
    kernel(target.beta, buffer);
    return;
  }
  Tensor tmp = empty_in(buffer.shape(), f, buffer);
  kernel(0.f, tmp);
  add_into(tmp, target);
}

// --- matmul -----------------------------------------------------------------------------------
class MatMulNode final : public Node {
 public:
  Tensor a, b;
  const char* name() const override { return "matmul"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::gemm(false, true, 1.f, gy, b, t[0].beta, *t[0].tensor);
    if (t[1].needed()) backend::gemm(true, false, 1.f, a, gy, t[1].beta, *t[1].tensor);
  }
  void release() override { a = b = Tensor(); }
};

// --- linear -----------------------------------------------------------------------------------
class LinearNode final : public Node {
 public:
  Tensor x, w;
  const char* name() const override { return "linear"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::gemm(false, false, 1.f, gy, w, t[0].beta, *t[0].tensor);  // gx = gy W
    if (t[1].needed()) backend::gemm(true, false, 1.f, gy, x, t[1].beta, *t[1].tensor);   // gW = gy^T x
    if (t.size() > 2 && t[2].needed()) backend::sum_rows(1.f, gy, t[2].beta, *t[2].tensor);  // gb = sum_rows gy
  }
  void release() override { x = w = Tensor(); }
};

// --- add / sub / mul --------------------------------------------------------------------------
Broadcast broadcast_of(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return Broadcast::kNone;
  if (b.dim() == 1 && a.dim() >= 1 && b.size(0) == a.size(-1)) return Broadcast::kRow;
  if (b.numel() == 1) return Broadcast::kScalar;
  DPL_FAIL(op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " do not match; expected equal shapes, a second operand of shape (", a.dim() ? a.size(-1) : 1,
           ",) (bias-style, broadcast over rows) or one with a single element");
}

// Writes target = beta*target + alpha * reduce(g) where reduce sums g down to the broadcast shape.
void reduce_into(Broadcast bc, float alpha, const Tensor& g, GradTarget& target) {
  switch (bc) {
    case Broadcast::kNone: backend::axpby(alpha, g, target.beta, *target.tensor); break;
    case Broadcast::kRow: backend::sum_rows(alpha, g, target.beta, *target.tensor); break;
    case Broadcast::kScalar: {
      Tensor s = empty_on({}, g);
      backend::sum_all(alpha, g, s);
      backend::axpby(1.f, s.reshape(target.tensor->shape()), target.beta, *target.tensor);
      break;
    }
  }
}

class BinaryNode final : public Node {
 public:
  BinaryOp op;
  Broadcast bc;
  Format format;  // of the forward's operands and output
  Tensor a, b;    // saved for mul only
  const char* name() const override { return op == BinaryOp::kAdd ? "add" : op == BinaryOp::kSub ? "sub" : "mul"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, format);
    if (op == BinaryOp::kMul) {
      if (t[0].needed())
        write_in(t[0], format, [&](float beta, Tensor& ga) { backend::binary(BinaryOp::kMul, bc, g, b, beta, ga); });
      if (t[1].needed()) {
        if (bc == Broadcast::kNone) {
          write_in(t[1], format,
                   [&](float beta, Tensor& gb) { backend::binary(BinaryOp::kMul, Broadcast::kNone, g, a, beta, gb); });
        } else {
          Tensor prod = empty_like(g);
          backend::binary(BinaryOp::kMul, Broadcast::kNone, g, a, 0.f, prod);
          reduce_into(bc, 1.f, prod, t[1]);
        }
      }
      return;
    }
    if (t[0].needed()) write_in(t[0], format, [&](float beta, Tensor& ga) { backend::axpby(1.f, g, beta, ga); });
    if (!t[1].needed()) return;
    const float sign = op == BinaryOp::kAdd ? 1.f : -1.f;
    if (bc == Broadcast::kNone) write_in(t[1], format, [&](float beta, Tensor& gb) { backend::axpby(sign, g, beta, gb); });
    else reduce_into(bc, sign, g, t[1]);
  }
  void release() override { a = b = Tensor(); }
};

Variable binary(BinaryOp op, const char* name, const Variable& a, const Variable& b) {
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_float(name, a.data(), "the first operand");
  check_float(name, b.data(), "the second operand");
  check_same_dtype(name, a.data(), b.data());
  check_same_device(name, a.data(), b.data());
  const Broadcast bc = broadcast_of(name, a.data(), b.data());
  // Equal shapes compute in the first operand's format (the second is brought to it); a row
  // broadcast needs the last logical extent innermost, so it computes contiguous.
  const Format format = bc == Broadcast::kRow ? Format::kContiguous : format_of(a.data());
  const Tensor ta = in_format(a.data(), format);
  const Tensor tb = bc == Broadcast::kNone ? in_format(b.data(), format) : dense(b.data());
  Tensor out = empty_in(ta.shape(), format, ta);
  backend::binary(op, bc, ta, tb, 0.f, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<BinaryNode>();
  node->op = op;
  node->bc = bc;
  node->format = format;
  if (op == BinaryOp::kMul) {
    node->a = ta;
    node->b = tb;
  }
  node->set_inputs({a, b});
  return Variable::make_result(out, node);
}

// --- relu -------------------------------------------------------------------------------------
class ReluNode final : public Node {
 public:
  Tensor y;
  const char* name() const override { return "relu"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Format f = format_of(y);
    const Tensor g = in_format(gy, f);
    write_in(t[0], f, [&](float beta, Tensor& gx) { backend::relu_backward(y, g, beta, gx); });
  }
  void release() override { y = Tensor(); }
};

// --- reshape ----------------------------------------------------------------------------------
class ReshapeNode final : public Node {
 public:
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy).reshape(in_shape);
    write_in(t[0], Format::kContiguous, [&](float beta, Tensor& gx) { backend::axpby(1.f, g, beta, gx); });
  }
};

// --- sum / mean -------------------------------------------------------------------------------
class SumNode final : public Node {
 public:
  float scale = 1.f;
  bool average = false;
  const char* name() const override { return average ? "mean" : "sum"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::fill_scaled(scale, gy, t[0].beta, *t[0].tensor);
  }
};

Variable reduce_all(const char* name, const Variable& x, bool average) {
  check_defined(name, x, "input");
  check_float(name, x.data(), "an input");
  const Tensor tx = dense_keep(x.data());  // a sum reads memory order, whatever the format
  const float scale = average ? 1.f / static_cast<float>(std::max<std::int64_t>(tx.numel(), 1)) : 1.f;
  DPL_CHECK(!average || tx.numel() > 0, name, ": expected a non-empty input, got shape ", shape_str(tx.shape()));
  Tensor out = empty_on({}, tx);
  backend::sum_all(scale, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SumNode>();
  node->scale = scale;
  node->average = average;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// --- softmax cross-entropy ----------------------------------------------------------------------
void check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels) {
  check_float(op, logits, "logits");
  check_rank(op, logits, 2, "logits (N, C)");
  DPL_CHECK(labels.defined(), op, ": the labels are undefined");
  DPL_CHECK(labels.dtype() == DType::kInt32, op, ": expected labels of dtype int32, got ", labels.dtype());
  DPL_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0), op, ": expected labels of shape (",
            logits.size(0), ",) for logits of shape ", shape_str(logits.shape()), ", got ",
            shape_str(labels.shape()));
  check_same_device(op, logits, labels);
  // Device labels are not read back here: that would make the host wait for the GPU on every
  // step. The CUDA loss turns an out-of-range label into NaN instead (see the header).
  if (labels.numel() == 0 || !labels.device().is_cpu()) return;
  const Tensor t = dense(labels);
  const std::int32_t* p = t.data<std::int32_t>();
  const auto [lo, hi] = std::minmax_element(p, p + t.numel());
  DPL_CHECK(*lo >= 0 && *hi < logits.size(1), op, ": expected labels in [0, ", logits.size(1), "), got values in [",
            *lo, ", ", *hi, "]");
}

class SoftmaxXentNode final : public Node {
 public:
  Tensor probs, labels;
  float smoothing = 0.f;
  const char* name() const override { return "softmax_cross_entropy"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::softmax_xent_backward(probs, labels, smoothing, gy, t[0].beta, *t[0].tensor);
  }
  void release() override { probs = labels = Tensor(); }
};
}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  const char* op = "matmul";
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_float(op, a.data(), "the first operand");
  check_float(op, b.data(), "the second operand");
  check_same_dtype(op, a.data(), b.data());
  check_rank(op, a.data(), 2, "a first operand");
  check_rank(op, b.data(), 2, "a second operand");
  check_same_device(op, a.data(), b.data());
  DPL_CHECK(a.data().size(1) == b.data().size(0), op, ": inner extents differ: ", shape_str(a.shape()), " x ",
            shape_str(b.shape()), "; expected the second operand to have ", a.data().size(1), " rows");
  const Tensor ta = dense(a.data()), tb = dense(b.data());
  Tensor out = empty_on({ta.size(0), tb.size(1)}, ta);
  backend::gemm(false, false, 1.f, ta, tb, 0.f, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<MatMulNode>();
  node->a = ta;
  node->b = tb;
  node->set_inputs({a, b});
  return Variable::make_result(out, node);
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  const char* op = "linear";
  check_defined(op, x, "input");
  check_defined(op, weight, "weight");
  check_float(op, x.data(), "an input");
  check_float(op, weight.data(), "a weight");
  check_same_dtype(op, x.data(), weight.data());
  check_rank(op, x.data(), 2, "an input (N, in)");
  check_rank(op, weight.data(), 2, "a weight (out, in)");
  check_same_device(op, x.data(), weight.data());
  const std::int64_t in = weight.data().size(1), outf = weight.data().size(0);
  DPL_CHECK(x.data().size(1) == in, op, ": expected an input of shape (N, ", in, ") for a weight of shape ",
            shape_str(weight.shape()), ", got ", shape_str(x.shape()));
  if (bias.defined()) {
    check_float(op, bias.data(), "a bias");
    check_same_dtype(op, x.data(), bias.data());
    check_same_device(op, x.data(), bias.data());
    DPL_CHECK(bias.data().dim() == 1 && bias.data().size(0) == outf, op, ": expected a bias of shape (", outf,
              ",), got ", shape_str(bias.shape()));
  }
  const Tensor tx = dense(x.data()), tw = dense(weight.data());
  Tensor out = empty_on({tx.size(0), outf}, tx);
  backend::gemm(false, true, 1.f, tx, tw, 0.f, out);
  if (bias.defined()) backend::binary(BinaryOp::kAdd, Broadcast::kRow, out, dense(bias.data()), 0.f, out);
  const bool record = bias.defined() ? any_requires_grad({&x, &weight, &bias}) : any_requires_grad({&x, &weight});
  if (!record) return Variable(out);
  auto node = std::make_shared<LinearNode>();
  node->x = tx;
  node->w = tw;
  if (bias.defined()) node->set_inputs({x, weight, bias});
  else node->set_inputs({x, weight});
  return Variable::make_result(out, node);
}

Variable add(const Variable& a, const Variable& b) { return binary(BinaryOp::kAdd, "add", a, b); }
Variable sub(const Variable& a, const Variable& b) { return binary(BinaryOp::kSub, "sub", a, b); }
Variable mul(const Variable& a, const Variable& b) { return binary(BinaryOp::kMul, "mul", a, b); }

Variable relu(const Variable& x) {
  check_defined("relu", x, "input");
  check_float("relu", x.data(), "an input");
  const Tensor tx = dense_keep(x.data());
  Tensor out = empty_like(tx);
  backend::relu(tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ReluNode>();
  node->y = out;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable reshape(const Variable& x, const Shape& shape) {
  check_defined("reshape", x, "input");
  Tensor out = dense(x.data()).reshape(shape);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ReshapeNode>();
  node->in_shape = x.shape();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable flatten(const Variable& x, std::int64_t start_dim) {
  check_defined("flatten", x, "input");
  return reshape(x, dense(x.data()).flatten(start_dim).shape());
}

Variable sum(const Variable& x) { return reduce_all("sum", x, false); }
Variable mean(const Variable& x) { return reduce_all("mean", x, true); }

Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing) {
  const char* op = "softmax_cross_entropy";
  check_defined(op, logits, "logits");
  DPL_CHECK(label_smoothing >= 0.f && label_smoothing < 1.f, op, ": expected label_smoothing in [0, 1), got ",
            label_smoothing);
  check_logits_labels(op, logits.data(), labels);
  DPL_CHECK(logits.data().size(0) > 0, op, ": expected at least one row of logits, got shape ",
            shape_str(logits.shape()));
  const Tensor tl = dense(logits.data()), ty = dense(labels);
  Tensor probs = empty_like(tl);
  Tensor loss = empty_on({}, tl);
  backend::softmax_xent(tl, ty, label_smoothing, probs, loss);
  if (!any_requires_grad({&logits})) return Variable(loss);
  auto node = std::make_shared<SoftmaxXentNode>();
  node->probs = probs;
  node->labels = ty;
  node->smoothing = label_smoothing;
  node->set_inputs({logits});
  return Variable::make_result(loss, node);
}

Tensor accuracy(const Variable& logits, const Tensor& labels) {
  const char* op = "accuracy";
  check_defined(op, logits, "logits");
  check_logits_labels(op, logits.data(), labels);
  const Tensor tl = dense(logits.data());
  Tensor out = empty_on({}, tl);
  backend::accuracy(tl, dense(labels), out);
  return out;
}

// --- conv2d -------------------------------------------------------------------------------------
// The kernels take every operand in one memory format, the input's: contiguous (NCHW), or
// channels-last when the input is channels-last and not also contiguous. Operands in the other
// format are converted here; in a channels-last network that is only the incoming gradient and
// the input gradient, whose buffers autograd allocates contiguous.
namespace {

class Conv2dNode final : public Node {
 public:
  Tensor x, w;
  backend::Conv2dParams p;
  Format format = Format::kContiguous;
  const char* name() const override { return "conv2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, format);
    if (t[0].needed())
      write_in(t[0], format, [&](float beta, Tensor& gx) { backend::conv2d_backward_data(g, w, p, beta, gx); });
    if (t[1].needed())
      write_in(t[1], format, [&](float beta, Tensor& gw) { backend::conv2d_backward_weight(x, g, p, beta, gw); });
    if (t.size() > 2 && t[2].needed()) backend::conv2d_backward_bias(g, t[2].beta, *t[2].tensor);
  }
  void release() override { x = w = Tensor(); }
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

}  // namespace

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, Conv2dPair stride,
                Conv2dPair padding, Conv2dPair dilation, std::int64_t groups) {
  const char* op = "conv2d";
  check_defined(op, x, "input");
  check_defined(op, weight, "weight");
  check_float(op, x.data(), "an input");
  check_float(op, weight.data(), "a weight");
  check_same_dtype(op, x.data(), weight.data());
  check_same_device(op, x.data(), weight.data());
  check_rank(op, x.data(), 4, "an input (N, C, H, W)");
  check_rank(op, weight.data(), 4, "a weight (out_channels, in_channels/groups, kh, kw)");
  check_conv2d_geometry(op, stride, padding, dilation, groups);
  const Shape& xs = x.shape();
  const Shape& ws = weight.shape();
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
  if (bias.defined()) {
    check_float(op, bias.data(), "a bias");
    check_same_dtype(op, x.data(), bias.data());
    check_same_device(op, x.data(), bias.data());
    DPL_CHECK(bias.data().dim() == 1 && bias.data().size(0) == out_c, op, ": expected a bias of shape (", out_c,
              ",), got ", shape_str(bias.shape()));
  }
  backend::Conv2dParams p;
  for (int i = 0; i < 2; ++i) {
    p.stride[i] = stride[i];
    p.padding[i] = padding[i];
    p.dilation[i] = dilation[i];
  }
  p.groups = groups;
  const Format format = format_of(x.data());
  const Tensor tx = in_format(x.data(), format), tw = in_format(weight.data(), format);
  const Tensor tb = bias.defined() ? dense(bias.data()) : Tensor();
  const TensorOptions options(tx.dtype(), tx.device());
  Tensor out = format == Format::kChannelsLast ? Tensor::empty_channels_last(ys, options) : Tensor::empty(ys, options);
  backend::conv2d_forward(tx, tw, bias.defined() ? &tb : nullptr, p, out);
  const bool record = bias.defined() ? any_requires_grad({&x, &weight, &bias}) : any_requires_grad({&x, &weight});
  if (!record) return Variable(out);
  auto node = std::make_shared<Conv2dNode>();
  node->x = tx;
  node->w = tw;
  node->p = p;
  node->format = format;
  if (bias.defined()) node->set_inputs({x, weight, bias});
  else node->set_inputs({x, weight});
  return Variable::make_result(out, node);
}

// --- normalization and pooling ------------------------------------------------------------------
namespace {

bool is_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides()[1] == 1 && t.strides()[3] == t.size(1) && t.strides()[2] == t.size(3) * t.size(1) &&
         t.strides()[0] == t.size(2) * t.size(3) * t.size(1);
}

// x checked as a float (N, C, H, W) tensor, in NCHW or channels-last memory (anything else is
// copied to NCHW, the one format every kernel takes besides channels-last).
Tensor image_input(const char* op, const Variable& x) {
  check_defined(op, x, "input");
  check_float(op, x.data(), "an input");
  check_rank(op, x.data(), 4, "an input (N, C, H, W)");
  return is_channels_last(x.data()) ? x.data() : dense(x.data());
}

// An uninitialised image of `shape` in like's dtype, device and memory format.
Tensor empty_image(const Shape& shape, const Tensor& like) {
  if (!is_channels_last(like)) return empty_on(shape, like);
  auto storage = Storage::allocate(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(like.dtype()),
                                   like.device());
  return Tensor(storage, 0, shape, {shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1]}, like.dtype());
}

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
  if (stride.h == 0 && stride.w == 0) stride = kernel;
  DPL_CHECK(kernel.h >= 1 && kernel.w >= 1, op, ": expected a kernel of at least 1x1, got ", kernel.h, "x", kernel.w);
  DPL_CHECK(stride.h >= 1 && stride.w >= 1, op, ": expected strides >= 1, got ", stride.h, "x", stride.w);
  DPL_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, op,
            ": expected padding between 0 and half the kernel (", kernel.h / 2, "x", kernel.w / 2, "), got ",
            padding.h, "x", padding.w);
  const std::int64_t ph = tx.size(2) + 2 * padding.h, pw = tx.size(3) + 2 * padding.w;
  DPL_CHECK(kernel.h <= ph && kernel.w <= pw, op, ": kernel ", kernel.h, "x", kernel.w,
            " is larger than the padded input ", ph, "x", pw, " (input shape ", shape_str(tx.shape()), ", padding ",
            padding.h, "x", padding.w, ")");
  const backend::Pool2dParams p{kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w};
  const Shape out_shape{tx.size(0), tx.size(1), (ph - kernel.h) / stride.h + 1, (pw - kernel.w) / stride.w + 1};
  Tensor y = empty_image(out_shape, tx);
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

// weight, bias, running statistics: (C,) on x's device, or undefined. Statistics are float32;
// the affine parameters may also be 16-bit (a model cast by optim::MixedPrecision, whose arena
// has one dtype), and are then widened to float32 for the kernels.
void check_channel_vector(const char* op, const Tensor& t, const Tensor& x, const char* what,
                          bool any_float = false) {
  if (!t.defined()) return;
  if (any_float) {
    DPL_CHECK(is_float_dtype(t.dtype()), op, ": expected ", what, " of dtype float32, bfloat16 or float16, got ",
              t.dtype());
  } else {
    DPL_CHECK(t.dtype() == kFloat32, op, ": expected ", what, " of dtype float32 (statistics are float32 for every",
              " input dtype), got ", t.dtype());
  }
  DPL_CHECK(t.dim() == 1 && t.size(0) == x.size(1), op, ": expected ", what, " of shape (", x.size(1),
            ",) for an input with ", x.size(1), " channels (shape ", shape_str(x.shape()), "), got ",
            shape_str(t.shape()));
  check_same_device(op, x, t);
  DPL_CHECK(t.is_contiguous(), op, ": expected a contiguous ", what);
}

// t itself when float32, else a float32 copy (C elements: the kernels take float32 affine
// parameters whatever the image dtype).
Tensor as_float32(const Tensor& t) { return t.dtype() == kFloat32 ? t : t.to(kFloat32); }

// target = beta*target + g for a float32 per-channel gradient g and a target of the parameter's
// dtype (16-bit under mixed precision: rounded once, here).
void accumulate_channel(const Tensor& g, GradTarget& target) {
  const Tensor& dst = *target.tensor;
  backend::axpby(1.f, dst.dtype() == g.dtype() ? g : g.to(dst.dtype()), target.beta, *target.tensor);
}

// Where a batch norm kernel writes a per-channel gradient (float32, (C,)) for targets[k]: the
// target itself when it takes the kernel's output as it is (a first contribution to a float32,
// contiguous buffer), which saves a copy per parameter and call; else scratch that
// finish_channel_grad adds in afterwards.
Tensor channel_grad_buffer(std::vector<GradTarget>& t, std::size_t k, const Tensor& like) {
  const std::int64_t c = like.numel();
  if (t.size() > k && t[k].needed()) {
    const Tensor& dst = *t[k].tensor;
    if (t[k].beta == 0.f && dst.dtype() == kFloat32 && dst.is_contiguous() && dst.numel() == c &&
        dst.device() == like.device())
      return dst;
  }
  return empty_on({c}, like);
}
void finish_channel_grad(const Tensor& g, std::vector<GradTarget>& t, std::size_t k) {
  if (t.size() <= k || !t[k].needed()) return;
  if (g.raw_data() == t[k].tensor->raw_data()) return;  // channel_grad_buffer handed out the target itself
  accumulate_channel(g, t[k]);
}

// The per-channel tensors of a batch norm call, checked, with defaults for the undefined ones:
// scale 1, shift 0, and scratch running statistics that a momentum of 0 leaves unused.
struct BatchNormArgs {
  Tensor w, b, rm, rv;
  float momentum;
};

BatchNormArgs batch_norm_args(const char* op, const Tensor& tx, const Variable& weight, const Variable& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                              double eps) {
  DPL_CHECK(!training || tx.size(0) * tx.size(2) * tx.size(3) >= 2, op,
            ": training mode needs at least 2 values per channel (N*H*W), got shape ", shape_str(tx.shape()));
  check_channel_vector(op, weight.defined() ? weight.data() : Tensor(), tx, "a weight", true);
  check_channel_vector(op, bias.defined() ? bias.data() : Tensor(), tx, "a bias", true);
  DPL_CHECK(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(), op,
            ": expected weight and bias of one dtype, got ", weight.dtype(), " and ", bias.dtype());
  check_channel_vector(op, running_mean, tx, "running_mean");
  check_channel_vector(op, running_var, tx, "running_var");
  DPL_CHECK(weight.defined() == bias.defined(), op, ": expected weight and bias both defined or both undefined");
  DPL_CHECK(running_mean.defined() == running_var.defined(), op,
            ": expected running_mean and running_var both defined or both undefined");
  DPL_CHECK(eps > 0.0, op, ": expected eps > 0, got ", eps);
  DPL_CHECK(momentum >= 0.0 && momentum <= 1.0, op, ": expected momentum in [0, 1], got ", momentum);
  const std::int64_t c = tx.size(1);
  const TensorOptions stats(kFloat32, tx.device());
  return {weight.defined() ? as_float32(weight.data()) : Tensor::ones({c}, stats),
          bias.defined() ? as_float32(bias.data()) : Tensor::zeros({c}, stats),
          running_mean.defined() ? running_mean : Tensor::zeros({c}, stats),
          running_var.defined() ? running_var : Tensor::ones({c}, stats),
          running_mean.defined() ? static_cast<float>(momentum) : 0.f};
}

class BatchNormNode final : public Node {
 public:
  Tensor x, weight, save_mean, save_invstd;
  float eps = 0.f;
  const char* name() const override { return "batch_norm"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    Tensor gw = channel_grad_buffer(t, 1, weight), gb = channel_grad_buffer(t, 2, weight);
    Tensor scratch;
    Tensor* gx = t[0].needed() ? t[0].tensor : nullptr;
    if (gx == nullptr) gx = &(scratch = empty_image(x.shape(), x));
    backend::batch_norm_backward(x, gy, weight, save_mean, save_invstd, eps, t[0].needed() ? t[0].beta : 0.f, *gx, gw,
                                 gb);
    finish_channel_grad(gw, t, 1);
    finish_channel_grad(gb, t, 2);
  }
  void release() override { x = weight = save_mean = save_invstd = Tensor(); }
};

// Evaluation mode is an affine map per channel, y = (x - mean) * invstd * weight + bias with the
// running statistics as constants (fine-tuning with frozen statistics trains through it):
// gx = gy * weight * invstd, gweight = sum(gy * xhat), gbias = sum(gy). Both come from the
// forward kernels: gx is batch_norm_infer of gy with a zero mean and bias; xhat is
// batch_norm_infer of x with a unit weight, and the training backward kernel over xhat with a
// mean of 0 and an invstd of 1 sums gy * xhat and gy (its own gx is discarded).
class BatchNormEvalNode final : public Node {
 public:
  Tensor x, weight, running_mean, running_var;  // the statistics as they were at forward
  float eps = 0.f;
  const char* name() const override { return "batch_norm"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const std::int64_t c = x.size(1);
    const Tensor zeros = Tensor::zeros({c}, TensorOptions(kFloat32, x.device()));
    if (t[0].needed()) {
      Tensor gx = empty_image(x.shape(), gy);
      backend::batch_norm_infer(gy, weight, zeros, zeros, running_var, eps, gx);
      add_into(gx, t[0]);
    }
    const bool affine = t.size() > 1;
    if (!affine || !(t[1].needed() || t[2].needed())) return;
    const Tensor ones = Tensor::ones({c}, TensorOptions(kFloat32, x.device()));
    Tensor xhat = empty_image(x.shape(), x), discarded = empty_image(x.shape(), x);
    backend::batch_norm_infer(x, ones, zeros, running_mean, running_var, eps, xhat);
    Tensor gw = empty_on({c}, weight), gb = empty_on({c}, weight);
    backend::batch_norm_backward(xhat, gy, ones, zeros, ones, 0.f, 0.f, discarded, gw, gb);
    if (t[1].needed()) accumulate_channel(gw, t[1]);
    if (t[2].needed()) accumulate_channel(gb, t[2]);
  }
  void release() override { x = weight = running_mean = running_var = Tensor(); }
};

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

Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  const Tensor tx = image_input(op, x);
  const std::int64_t c = tx.size(1);
  BatchNormArgs args = batch_norm_args(op, tx, weight, bias, running_mean, running_var, training, momentum, eps);
  const TensorOptions stats(kFloat32, tx.device());
  Tensor y = empty_image(tx.shape(), tx);
  if (!training) {
    DPL_CHECK(running_mean.defined(), op, ": evaluation mode needs running_mean and running_var, got none");
    if (tx.numel() > 0)
      backend::batch_norm_infer(tx, args.w, args.b, running_mean, running_var, static_cast<float>(eps), y);
    const bool record = weight.defined() ? any_requires_grad({&x, &weight, &bias}) : any_requires_grad({&x});
    if (!record) return Variable(y);
    auto node = std::make_shared<BatchNormEvalNode>();
    node->x = tx;
    node->weight = args.w;
    node->running_mean = running_mean.clone();
    node->running_var = running_var.clone();
    node->eps = static_cast<float>(eps);
    if (weight.defined()) node->set_inputs({x, weight, bias});
    else node->set_inputs({x});
    return Variable::make_result(y, node);
  }
  Tensor save_mean = Tensor::empty({c}, stats), save_invstd = Tensor::empty({c}, stats);
  backend::batch_norm_train(tx, args.w, args.b, static_cast<float>(eps), args.momentum, args.rm, args.rv, y, save_mean,
                            save_invstd);
  const bool record = weight.defined() ? any_requires_grad({&x, &weight, &bias}) : any_requires_grad({&x});
  if (!record) return Variable(y);
  auto node = std::make_shared<BatchNormNode>();
  node->x = tx;
  node->weight = args.w;
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  node->eps = static_cast<float>(eps);
  if (weight.defined()) node->set_inputs({x, weight, bias});
  else node->set_inputs({x});
  return Variable::make_result(y, node);
}

namespace {

// Backward of the fused relu(batch_norm(x) [+ z]): the kernel writes every gradient into
// scratch in x's format, then each goes to its target with the target's beta.
class BatchNormActNode final : public Node {
 public:
  bool add = false;
  Tensor x, y, reserve, weight, bias, save_mean, save_invstd;
  float eps = 0.f;
  const char* name() const override { return add ? "batch_norm_add_relu" : "batch_norm_relu"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    // The kernel overwrites gx and gz: a target it may overwrite in x's layout (the usual case,
    // its first contribution) takes them directly; anything else goes through scratch.
    auto writable = [&](const GradTarget& g) {
      return g.needed() && g.beta == 0.f && g.tensor->strides() == x.strides();
    };
    const bool gx_direct = writable(t[0]), gz_direct = add && writable(t[1]);
    Tensor gx = gx_direct ? *t[0].tensor : empty_image(x.shape(), x);
    Tensor gz = !add ? gx : gz_direct ? *t[1].tensor : empty_image(x.shape(), x);
    const std::size_t params = add ? 2 : 1;
    Tensor gw = channel_grad_buffer(t, params, weight), gb = channel_grad_buffer(t, params + 1, weight);
    backend::batch_norm_act_backward(add, x, y, gy, reserve, weight, bias, save_mean, save_invstd, eps, gx, gz, gw, gb);
    if (t[0].needed() && !gx_direct) add_into(gx, t[0]);
    if (add && t[1].needed() && !gz_direct) add_into(gz, t[1]);
    finish_channel_grad(gw, t, params);
    finish_channel_grad(gb, t, params + 1);
  }
  void release() override { x = y = reserve = weight = bias = save_mean = save_invstd = Tensor(); }
};

// relu(batch_norm(x) [+ z]) through the device's fused kernel when it has one for x (training
// mode only: evaluation is one cheap pass anyway), else composed from the plain ops.
Variable batch_norm_act(const char* op, const Variable& x, const Variable* z, const Variable& weight,
                        const Variable& bias, const Tensor& running_mean, const Tensor& running_var, bool training,
                        double momentum, double eps) {
  const Tensor tx = image_input(op, x);
  Tensor tz;
  if (z != nullptr) {
    check_defined(op, *z, "residual z");
    tz = z->data();
    DPL_CHECK(tz.shape() == tx.shape(), op, ": expected a residual z of the input's shape ", shape_str(tx.shape()),
              ", got ", shape_str(tz.shape()));
    check_same_dtype(op, tx, tz);
    check_same_device(op, tx, tz);
  }
  const bool fused = training && tx.numel() > 0 && backend::batch_norm_act_available(tx) &&
                     (z == nullptr || tz.strides() == tx.strides());
  if (!fused) {
    const Variable bn = batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    return relu(z == nullptr ? bn : add(bn, *z));
  }
  BatchNormArgs args = batch_norm_args(op, tx, weight, bias, running_mean, running_var, training, momentum, eps);
  const std::int64_t c = tx.size(1);
  const TensorOptions stats(kFloat32, tx.device());
  Tensor y = empty_image(tx.shape(), tx);
  Tensor save_mean = Tensor::empty({c}, stats), save_invstd = Tensor::empty({c}, stats);
  Tensor reserve = backend::batch_norm_act_train(z != nullptr, tx, z != nullptr ? tz : tx, args.w, args.b,
                                                 static_cast<float>(eps), args.momentum, args.rm, args.rv, y, save_mean,
                                                 save_invstd);
  std::vector<Variable> inputs{x};
  if (z != nullptr) inputs.push_back(*z);
  if (weight.defined()) {
    inputs.push_back(weight);
    inputs.push_back(bias);
  }
  bool record = false;
  for (const Variable& v : inputs) record = record || any_requires_grad({&v});
  if (!record) return Variable(y);
  auto node = std::make_shared<BatchNormActNode>();
  node->add = z != nullptr;
  node->x = tx;
  // Without a residual, backward recomputes the ReLU's mask from x and never reads y: a
  // zero-element stand-in keeps the graph from holding y for it (kernels.hpp).
  node->y = z != nullptr ? y : Tensor::empty({0}, TensorOptions(y.dtype(), y.device()));
  node->reserve = reserve;
  node->weight = args.w;
  node->bias = args.b;
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  node->eps = static_cast<float>(eps);
  node->set_inputs(std::move(inputs));
  return Variable::make_result(y, node);
}

}  // namespace

Variable batch_norm_relu(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_act("batch_norm_relu", x, nullptr, weight, bias, running_mean, running_var, training, momentum,
                        eps);
}

Variable batch_norm_add_relu(const Variable& x, const Variable& z, const Variable& weight, const Variable& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                             double eps) {
  return batch_norm_act("batch_norm_add_relu", x, &z, weight, bias, running_mean, running_var, training, momentum,
                        eps);
}

// --- activations, dropout, softmax, argmax, mean squared error, scalar arithmetic ---------------

namespace {
using backend::Activation;

// Checks a float input of a single-input op and returns it as a dense tensor in its own format.
Tensor float_input(const char* op, const Variable& x) {
  check_defined(op, x, "input");
  check_float(op, x.data(), "an input");
  return dense_keep(x.data());
}

class ActivationNode final : public Node {
 public:
  const char* op = "";
  Activation f = Activation::kSigmoid;
  float slope = 0.f;
  Tensor saved;  // the input or the output, as backend::backward_reads_output(f) says
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Format format = format_of(saved);
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::activation_backward(f, slope, saved, g, beta, gx); });
  }
  void release() override { saved = Tensor(); }
};

Variable activation(const char* op, Activation f, float slope, const Variable& x) {
  const Tensor tx = float_input(op, x);
  Tensor out = empty_like(tx);
  backend::activation(f, slope, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ActivationNode>();
  node->op = op;
  node->f = f;
  node->slope = slope;
  node->saved = backend::backward_reads_output(f) ? out : tx;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// The gradient of dropout is dropout of the gradient with the same seed: the mask is recomputed.
class DropoutNode final : public Node {
 public:
  float p = 0.f;
  std::uint64_t seed = 0;
  Format format = Format::kContiguous;  // the mask follows memory order, so backward keeps the forward's
  const char* name() const override { return "dropout"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::dropout(p, seed, g, beta, gx); });
  }
};

class SoftmaxNode final : public Node {
 public:
  bool log = false;
  Tensor y;
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], Format::kContiguous, [&](float beta, Tensor& gx) { backend::softmax_backward(log, y, g, beta, gx); });
  }
  void release() override { y = Tensor(); }
};

Variable softmax_over_rows(const char* op, bool log, const Variable& x) {
  const Tensor tx = dense(float_input(op, x));  // rows: the last logical extent innermost
  DPL_CHECK(tx.dim() >= 1, op, ": expected an input with at least 1 dimension, got shape ", shape_str(tx.shape()));
  Tensor out = empty_like(tx);
  backend::softmax(log, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SoftmaxNode>();
  node->log = log;
  node->y = out;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

class MseNode final : public Node {
 public:
  Tensor x, target;
  const char* name() const override { return "mse_loss"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Format f = format_of(x);
    if (t[0].needed())
      write_in(t[0], f, [&](float beta, Tensor& gx) { backend::mse_backward(x, target, gy, 1.f, beta, gx); });
    if (t[1].needed())
      write_in(t[1], f, [&](float beta, Tensor& gt) { backend::mse_backward(x, target, gy, -1.f, beta, gt); });
  }
  void release() override { x = target = Tensor(); }
};

class AffineNode final : public Node {
 public:
  float a = 1.f;
  Format format = Format::kContiguous;
  const char* name() const override { return "affine"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::axpby(a, g, beta, gx); });
  }
};
}  // namespace

Variable leaky_relu(const Variable& x, float slope) { return activation("leaky_relu", Activation::kLeakyRelu, slope, x); }
Variable sigmoid(const Variable& x) { return activation("sigmoid", Activation::kSigmoid, 0.f, x); }
Variable tanh(const Variable& x) { return activation("tanh", Activation::kTanh, 0.f, x); }
Variable gelu(const Variable& x) { return activation("gelu", Activation::kGelu, 0.f, x); }

Variable dropout(const Variable& x, float p, Generator& gen, bool training) {
  const char* op = "dropout";
  DPL_CHECK(p >= 0.f && p < 1.f, op, ": expected a drop probability p in [0, 1), got ", p);
  const Tensor tx = float_input(op, x);
  if (!training || p == 0.f) return x;
  const std::uint64_t seed = gen.next_u64();
  Tensor out = empty_like(tx);
  backend::dropout(p, seed, tx, 0.f, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<DropoutNode>();
  node->p = p;
  node->seed = seed;
  node->format = format_of(tx);
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable softmax(const Variable& x) { return softmax_over_rows("softmax", false, x); }
Variable log_softmax(const Variable& x) { return softmax_over_rows("log_softmax", true, x); }

Tensor argmax(const Variable& x) {
  const char* op = "argmax";
  const Tensor tx = float_input(op, x);
  DPL_CHECK(tx.dim() >= 1 && tx.size(-1) > 0, op,
            ": expected an input with at least 1 dimension and a non-empty last one, got shape ", shape_str(tx.shape()));
  Shape rows = tx.shape();
  rows.pop_back();
  Tensor out = Tensor::empty(rows, TensorOptions(kInt64, tx.device()));
  backend::argmax(tx, out);
  return out;
}

Variable mse_loss(const Variable& x, const Variable& target) {
  const char* op = "mse_loss";
  check_defined(op, x, "input");
  check_defined(op, target, "target");
  check_float(op, x.data(), "an input");
  check_float(op, target.data(), "a target");
  check_same_dtype(op, x.data(), target.data());
  check_same_device(op, x.data(), target.data());
  DPL_CHECK(x.shape() == target.shape(), op, ": expected a target of the input's shape ", shape_str(x.shape()),
            ", got ", shape_str(target.shape()));
  DPL_CHECK(x.numel() > 0, op, ": expected a non-empty input, got shape ", shape_str(x.shape()));
  const Tensor tx = dense_keep(x.data()), tt = in_format(target.data(), format_of(tx));
  Tensor loss = empty_on({}, tx);
  backend::mse(tx, tt, loss);
  if (!any_requires_grad({&x, &target})) return Variable(loss);
  auto node = std::make_shared<MseNode>();
  node->x = tx;
  node->target = tt;
  node->set_inputs({x, target});
  return Variable::make_result(loss, node);
}

Variable affine(const Variable& x, float a, float b) {
  const Tensor tx = float_input("affine", x);
  Tensor out = empty_like(tx);
  backend::axpby(a, tx, 0.f, out);
  if (b != 0.f) {
    const Tensor shift = Tensor::full({1}, b, TensorOptions(tx.dtype(), tx.device()));
    backend::binary(BinaryOp::kAdd, Broadcast::kScalar, out, shift, 0.f, out);
  }
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<AffineNode>();
  node->a = a;
  node->format = format_of(tx);
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace dpl
