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

// --- activations, dropout, softmax, argmax, mean squared error, scalar arithmetic ---------------

namespace {
using backend::Activation;

// Checks a float input of a single-input op and returns it as a dense tensor.
Tensor float_input(const char* op, const Variable& x) {
  check_defined(op, x, "input");
  check_float(op, x.data(), "an input");
  return dense(x.data());
}

class ActivationNode final : public Node {
 public:
  const char* op = "";
  Activation f = Activation::kSigmoid;
  float slope = 0.f;
  Tensor saved;  // the input or the output, as backend::backward_reads_output(f) says
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::activation_backward(f, slope, saved, gy, t[0].beta, *t[0].tensor);
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
  const char* name() const override { return "dropout"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::dropout(p, seed, dense(gy), t[0].beta, *t[0].tensor);
  }
};

class SoftmaxNode final : public Node {
 public:
  bool log = false;
  Tensor y;
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::softmax_backward(log, y, dense(gy), t[0].beta, *t[0].tensor);
  }
  void release() override { y = Tensor(); }
};

Variable softmax_over_rows(const char* op, bool log, const Variable& x) {
  const Tensor tx = float_input(op, x);
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
    if (t[0].needed()) backend::mse_backward(x, target, gy, 1.f, t[0].beta, *t[0].tensor);
    if (t[1].needed()) backend::mse_backward(x, target, gy, -1.f, t[1].beta, *t[1].tensor);
  }
  void release() override { x = target = Tensor(); }
};

class AffineNode final : public Node {
 public:
  float a = 1.f;
  const char* name() const override { return "affine"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::axpby(a, dense(gy), t[0].beta, *t[0].tensor);
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
  const Tensor tx = dense(x.data()), tt = dense(target.data());
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
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace dpl
