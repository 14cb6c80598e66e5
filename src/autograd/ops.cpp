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

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), TensorOptions(t.dtype(), t.device())); }
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
// Ops read their inputs as flat row-major arrays.
Tensor dense(const Tensor& t) { return t.contiguous(); }

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
  Tensor a, b;  // saved for mul only
  const char* name() const override { return op == BinaryOp::kAdd ? "add" : op == BinaryOp::kSub ? "sub" : "mul"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (op == BinaryOp::kMul) {
      if (t[0].needed()) backend::binary(BinaryOp::kMul, bc, gy, b, t[0].beta, *t[0].tensor);
      if (t[1].needed()) {
        if (bc == Broadcast::kNone) {
          backend::binary(BinaryOp::kMul, Broadcast::kNone, gy, a, t[1].beta, *t[1].tensor);
        } else {
          Tensor prod = empty_like(gy);
          backend::binary(BinaryOp::kMul, Broadcast::kNone, gy, a, 0.f, prod);
          reduce_into(bc, 1.f, prod, t[1]);
        }
      }
      return;
    }
    if (t[0].needed()) backend::axpby(1.f, gy, t[0].beta, *t[0].tensor);
    if (t[1].needed()) reduce_into(bc, op == BinaryOp::kAdd ? 1.f : -1.f, gy, t[1]);
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
  const Tensor ta = dense(a.data()), tb = dense(b.data());
  const Broadcast bc = broadcast_of(name, ta, tb);
  Tensor out = empty_like(ta);
  backend::binary(op, bc, ta, tb, 0.f, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<BinaryNode>();
  node->op = op;
  node->bc = bc;
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
    if (t[0].needed()) backend::relu_backward(y, gy, t[0].beta, *t[0].tensor);
  }
  void release() override { y = Tensor(); }
};

// --- reshape ----------------------------------------------------------------------------------
class ReshapeNode final : public Node {
 public:
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::axpby(1.f, dense(gy).reshape(in_shape), t[0].beta, *t[0].tensor);
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
  const Tensor tx = dense(x.data());
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
  const char* name() const override { return "softmax_cross_entropy"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::softmax_xent_backward(probs, labels, gy, t[0].beta, *t[0].tensor);
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
  const Tensor tx = dense(x.data());
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

Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels) {
  const char* op = "softmax_cross_entropy";
  check_defined(op, logits, "logits");
  check_logits_labels(op, logits.data(), labels);
  DPL_CHECK(logits.data().size(0) > 0, op, ": expected at least one row of logits, got shape ",
            shape_str(logits.shape()));
  const Tensor tl = dense(logits.data()), ty = dense(labels);
  Tensor probs = empty_like(tl);
  Tensor loss = empty_on({}, tl);
  backend::softmax_xent(tl, ty, probs, loss);
  if (!any_requires_grad({&logits})) return Variable(loss);
  auto node = std::make_shared<SoftmaxXentNode>();
  node->probs = probs;
  node->labels = ty;
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

Tensor in_format(const Tensor& t, bool nhwc) { return nhwc ? t.to_channels_last() : t.contiguous(); }
bool has_format(const Tensor& t, bool nhwc) { return nhwc ? t.is_channels_last() : t.is_contiguous(); }
// A dense tensor's elements in memory order (the same bytes whatever its layout).
Tensor flat(const Tensor& t) { return Tensor(t.storage(), t.offset(), {t.numel()}, {1}, t.dtype()); }

// Runs `kernel(beta, out)` into target's buffer when it has the kernel's format, else into a
// temporary that is then copied or added into the buffer in the buffer's own layout.
template <typename Kernel>
void write_gradient(GradTarget& target, bool nhwc, Kernel&& kernel) {
  Tensor& buffer = *target.tensor;
  if (has_format(buffer, nhwc)) {
    kernel(target.beta, buffer);
    return;
  }
  Tensor tmp = nhwc ? Tensor::empty_channels_last(buffer.shape(), TensorOptions(buffer.dtype(), buffer.device()))
                    : empty_like(buffer);
  kernel(0.f, tmp);
  if (target.beta == 0.f) {
    buffer.copy_(tmp);
    return;
  }
  Tensor flat_buffer = flat(buffer);
  backend::axpby(1.f, flat(in_format(tmp, !nhwc)), 1.f, flat_buffer);
}

class Conv2dNode final : public Node {
 public:
  Tensor x, w;
  backend::Conv2dParams p;
  bool nhwc = false;
  const char* name() const override { return "conv2d"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, nhwc);
    if (t[0].needed())
      write_gradient(t[0], nhwc, [&](float beta, Tensor& gx) { backend::conv2d_backward_data(g, w, p, beta, gx); });
    if (t[1].needed())
      write_gradient(t[1], nhwc, [&](float beta, Tensor& gw) { backend::conv2d_backward_weight(x, g, p, beta, gw); });
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
  const bool nhwc = x.data().is_channels_last() && !x.data().is_contiguous();
  const Tensor tx = in_format(x.data(), nhwc), tw = in_format(weight.data(), nhwc);
  const Tensor tb = bias.defined() ? dense(bias.data()) : Tensor();
  const TensorOptions options(tx.dtype(), tx.device());
  Tensor out = nhwc ? Tensor::empty_channels_last(ys, options) : Tensor::empty(ys, options);
  backend::conv2d_forward(tx, tw, bias.defined() ? &tb : nullptr, p, out);
  const bool record = bias.defined() ? any_requires_grad({&x, &weight, &bias}) : any_requires_grad({&x, &weight});
  if (!record) return Variable(out);
  auto node = std::make_shared<Conv2dNode>();
  node->x = tx;
  node->w = tw;
  node->p = p;
  node->nhwc = nhwc;
  if (bias.defined()) node->set_inputs({x, weight, bias});
  else node->set_inputs({x, weight});
  return Variable::make_result(out, node);
}

}  // namespace dpl
