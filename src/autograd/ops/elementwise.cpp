// Elementwise ops: add, sub, mul, div and pow with their broadcasts, relu and the other
// activations and unary maps, clamp, where and masked_fill, dropout, and the scalar affine map.
// The maps of one input work in memory order and keep their input's format; ops that broadcast
// PyTorch-style compute contiguous.
#include <optional>

#include "autograd/ops/broadcast.hpp"
#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;
using backend::Activation;
using backend::BinaryOp;
using backend::Broadcast;

namespace {

// --- add / sub / mul --------------------------------------------------------------------------
Broadcast broadcast_of(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return Broadcast::kNone;
  if (b.dim() == 1 && a.dim() >= 1 && b.size(0) == a.size(-1)) return Broadcast::kRow;
  if (b.numel() == 1) return Broadcast::kScalar;
  if (try_broadcast_shapes({&a.shape(), &b.shape()})) return Broadcast::kShape;
  DPL_FAIL(op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " do not broadcast; expected shapes that do (aligned at the last dimension, each pair of extents equal or "
           "one of them 1), a second operand of shape (",
           a.dim() ? a.size(-1) : 1, ",) (bias-style, broadcast over rows) or one with a single element");
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
    case Broadcast::kShape: reduce_to_target(g, alpha, target); break;
  }
}

class BinaryNode final : public Node {
 public:
  BinaryOp op;
  Broadcast bc;
  MemoryFormat format;  // of the forward's operands and output
  Tensor a, b;          // saved for mul only
  const char* name() const override { return op == BinaryOp::kAdd ? "add" : op == BinaryOp::kSub ? "sub" : "mul"; }
  // The gradient of a sum's operands is the sum's gradient itself: add hands that one tensor to
  // both (sub to its first operand) instead of copying it, which in a residual network saves two
  // copies of the stream's gradient per block. The engine copies a shared buffer before anything
  // adds into it.
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = in_format(gy, format);
    const bool passes_b = op == BinaryOp::kAdd && bc == Broadcast::kNone;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const bool passes = op != BinaryOp::kMul && (i == 0 || passes_b);
      if (t[i].unallocated && !t[i].tensor->defined() && !passes) t[i].allocate();
    }
    if (op == BinaryOp::kMul) {
      if (t[0].needed())
        write_in(t[0], format, [&](float beta, Tensor& ga) { backend::binary(BinaryOp::kMul, bc, g, b, beta, ga); });
      if (t[1].needed()) {
        if (bc == Broadcast::kNone) {
          write_in(t[1], format,
                   [&](float beta, Tensor& gb) { backend::binary(BinaryOp::kMul, Broadcast::kNone, g, a, beta, gb); });
        } else {
          Tensor prod = Tensor::empty_like(g);
          backend::binary(BinaryOp::kMul, Broadcast::kNone, g, a, 0.f, prod);
          reduce_into(bc, 1.f, prod, t[1]);
        }
      }
      return;
    }
    if (t[0].needed()) pass_into(g, t[0]);
    if (!t[1].needed()) return;
    if (passes_b) return pass_into(g, t[1]);
    const float sign = op == BinaryOp::kAdd ? 1.f : -1.f;
    if (bc == Broadcast::kNone) write_in(t[1], format, [&](float beta, Tensor& gb) { backend::axpby(sign, g, beta, gb); });
    else reduce_into(bc, sign, g, t[1]);
  }
  void release() override { a = b = Tensor(); }
};

// --- any op under PyTorch's broadcasting (also div and pow of equal shapes) -------------------
// Operands are contiguous and padded to the output's rank; each gradient is computed at the
// output's shape and summed down to its operand's.
class BroadcastBinaryNode final : public Node {
 public:
  BinaryOp op = BinaryOp::kAdd;
  const char* op_name = "";
  Broadcast bc = Broadcast::kShape;  // kNone when both operands have the output's shape
  Tensor a, b, out;                  // what the op's gradients read (a and b for mul and pow; b and out for div)
  const char* name() const override { return op_name; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = dense(gy).reshape(out_shape);
    // d(a op b)/d(operand) at the output's shape, times g.
    auto grad_times = [&](BinaryOp partial, const Tensor& x, const Tensor& y) {
      Tensor d = empty_on(out_shape, g);
      backend::binary(partial, bc, x, y, 0.f, d);
      backend::binary(BinaryOp::kMul, Broadcast::kNone, d, g, 0.f, d);
      return d;
    };
    switch (op) {
      case BinaryOp::kAdd:
      case BinaryOp::kSub:
        if (t[0].needed()) reduce_to_target(g, 1.f, t[0]);
        if (t[1].needed()) reduce_to_target(g, op == BinaryOp::kAdd ? 1.f : -1.f, t[1]);
        break;
      case BinaryOp::kMul:
        if (t[0].needed()) reduce_to_target(product(g, b), 1.f, t[0]);
        if (t[1].needed()) reduce_to_target(product(g, a), 1.f, t[1]);
        break;
      case BinaryOp::kDiv: {
        // d/da = 1/b, d/db = -(a/b)/b = -out/b.
        Tensor q = empty_on(out_shape, g);
        backend::binary(BinaryOp::kDiv, bc, g, b, 0.f, q);
        if (t[0].needed()) reduce_to_target(q, 1.f, t[0]);
        if (t[1].needed()) {
          backend::binary(BinaryOp::kMul, Broadcast::kNone, q, out, 0.f, q);
          reduce_to_target(q, -1.f, t[1]);
        }
        break;
      }
      case BinaryOp::kPow:
        if (bc == Broadcast::kNone) {
          // Both gradients in one pass, straight into the buffers when they are contiguous.
          Tensor* outs[2] = {nullptr, nullptr};
          float betas[2] = {0.f, 0.f};
          Tensor temps[2];
          for (std::size_t k = 0; k < 2; ++k) {
            if (!t[k].needed()) continue;
            if (has_format(*t[k].tensor, MemoryFormat::kContiguous)) {
              outs[k] = t[k].tensor;
              betas[k] = t[k].beta;
            } else {
              temps[k] = empty_on(out_shape, g);
              outs[k] = &temps[k];
            }
          }
          backend::pow_backward(a, b, g, betas[0], outs[0], betas[1], outs[1]);
          for (std::size_t k = 0; k < 2; ++k)
            if (temps[k].defined()) add_into(temps[k], t[k]);
          break;
        }
        if (t[0].needed()) reduce_to_target(grad_times(BinaryOp::kPowGradBase, a, b), 1.f, t[0]);
        if (t[1].needed()) reduce_to_target(grad_times(BinaryOp::kPowGradExponent, a, b), 1.f, t[1]);
        break;
      default: DPL_FAIL(op_name, ": no gradient for this operation");
    }
  }
  void release() override { a = b = out = Tensor(); }
  Shape out_shape;

 private:
  // g * x at the output's shape, x broadcast.
  Tensor product(const Tensor& g, const Tensor& x) const {
    Tensor p = empty_on(out_shape, g);
    backend::binary(BinaryOp::kMul, bc, g, x, 0.f, p);
    return p;
  }
};

Variable broadcast_binary(BinaryOp op, const char* name, const Variable& a, const Variable& b) {
  const Shape shape = broadcast_shapes(name, {&a.shape(), &b.shape()});
  const Tensor ta = dense(a.data()).reshape(padded_shape(a.shape(), shape.size()));
  const Tensor tb = dense(b.data()).reshape(padded_shape(b.shape(), shape.size()));
  const Broadcast bc = ta.shape() == shape && tb.shape() == shape ? Broadcast::kNone : Broadcast::kShape;
  Tensor out = empty_on(shape, ta);
  backend::binary(op, bc, ta, tb, 0.f, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<BroadcastBinaryNode>();
  node->op = op;
  node->op_name = name;
  node->bc = bc;
  node->out_shape = shape;
  if (op == BinaryOp::kMul || op == BinaryOp::kPow) node->a = ta;
  if (op == BinaryOp::kMul || op == BinaryOp::kPow || op == BinaryOp::kDiv) node->b = tb;
  if (op == BinaryOp::kDiv) node->out = out;
  node->set_inputs({a, b});
  return Variable::make_result(out, node);
}

Variable binary(BinaryOp op, const char* name, const Variable& a, const Variable& b) {
  check_operands(name, {{a, "the first operand"}, {b, "the second operand"}});
  const Broadcast bc = broadcast_of(name, a.data(), b.data());
  if (bc == Broadcast::kShape) return broadcast_binary(op, name, a, b);
  // Equal shapes compute in the first operand's format (the second is brought to it); a row
  // broadcast needs the last logical extent innermost, so it computes contiguous.
  const MemoryFormat format = bc == Broadcast::kRow ? MemoryFormat::kContiguous : a.data().memory_format();
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

// --- relu and the other activations -----------------------------------------------------------
class ReluNode final : public Node {
 public:
  Tensor y;
  const char* name() const override { return "relu"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const MemoryFormat f = y.memory_format();
    const Tensor g = in_format(gy, f);
    write_in(t[0], f, [&](float beta, Tensor& gx) { backend::relu_backward(y, g, beta, gx); });
  }
  void release() override { y = Tensor(); }
};

class ActivationNode final : public Node {
 public:
  const char* op = "";
  Activation f = Activation::kSigmoid;
  float slope = 0.f;
  float upper = 0.f;
  Tensor saved;  // the input or the output, as backend::backward_reads_output(f) says
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const MemoryFormat format = saved.memory_format();
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::activation_backward(f, slope, upper, saved, g, beta, gx); });
  }
  void release() override { saved = Tensor(); }
};

Variable activation(const char* op, Activation f, float slope, const Variable& x, float upper = 0.f) {
  const Tensor tx = float_input(op, x);
  Tensor out = Tensor::empty_like(tx);
  backend::activation(f, slope, upper, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ActivationNode>();
  node->op = op;
  node->f = f;
  node->slope = slope;
  node->upper = upper;
  node->saved = backend::backward_reads_output(f) ? out : tx;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// --- dropout ----------------------------------------------------------------------------------
// The gradient of dropout is dropout of the gradient with the same seed: the mask is recomputed.
class DropoutNode final : public Node {
 public:
  float p = 0.f;
  std::uint64_t seed = 0;
  MemoryFormat format = MemoryFormat::kContiguous;  // the mask follows memory order, so backward keeps the forward's
  const char* name() const override { return "dropout"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::dropout(p, seed, g, beta, gx); });
  }
};

// --- affine -----------------------------------------------------------------------------------
class AffineNode final : public Node {
 public:
  float a = 1.f;
  MemoryFormat format = MemoryFormat::kContiguous;
  const char* name() const override { return "affine"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::axpby(a, g, beta, gx); });
  }
};

// --- cast -------------------------------------------------------------------------------------
class CastNode final : public Node {
 public:
  DType from = kFloat32;
  const char* name() const override { return "cast"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) add_into(gy.to(from), t[0]);
  }
};

// --- where / masked_fill ----------------------------------------------------------------------
class WhereNode final : public Node {
 public:
  const char* op = "";
  Tensor cond;  // padded to the output's rank
  Shape a_shape, b_shape;
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = dense(gy);
    const Tensor zero = Tensor::zeros(Shape(g.shape().size(), 1), TensorOptions(g.dtype(), g.device()));
    for (int k = 0; k < 2; ++k) {
      if (!t[static_cast<std::size_t>(k)].needed()) continue;
      Tensor part = empty_on(g.shape(), g);
      backend::where(cond, k == 0 ? g : zero, k == 0 ? zero : g, part);
      reduce_to_target(part, 1.f, t[static_cast<std::size_t>(k)]);
    }
  }
  void release() override { cond = Tensor(); }
};

Variable where_impl(const char* op, const Tensor& cond, const Variable& a, const Variable& b) {
  check_operands(op, {{a, "the first operand"}, {b, "the second operand"}});
  DPL_CHECK(cond.defined(), op, ": expected a condition tensor of dtype uint8, got an undefined tensor");
  DPL_CHECK(cond.dtype() == kUInt8, op, ": expected a condition (mask) of dtype uint8 (0 or 1), got ", cond.dtype());
  check_same_device(op, a.data(), "the first operand", cond, "the condition");
  const Shape shape = broadcast_shapes(op, {&cond.shape(), &a.shape(), &b.shape()});
  const std::size_t rank = shape.size();
  const Tensor tc = dense(cond).reshape(padded_shape(cond.shape(), rank));
  const Tensor ta = dense(a.data()).reshape(padded_shape(a.shape(), rank));
  const Tensor tb = dense(b.data()).reshape(padded_shape(b.shape(), rank));
  Tensor out = empty_on(shape, ta);
  backend::where(tc, ta, tb, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<WhereNode>();
  node->op = op;
  node->cond = tc;
  node->set_inputs({a, b});
  return Variable::make_result(out, node);
}

}  // namespace

Variable add(const Variable& a, const Variable& b) { return binary(BinaryOp::kAdd, "add", a, b); }
Variable sub(const Variable& a, const Variable& b) { return binary(BinaryOp::kSub, "sub", a, b); }
Variable mul(const Variable& a, const Variable& b) { return binary(BinaryOp::kMul, "mul", a, b); }

Variable div(const Variable& a, const Variable& b) {
  check_operands("div", {{a, "the first operand"}, {b, "the second operand"}});
  return broadcast_binary(BinaryOp::kDiv, "div", a, b);
}

Variable pow(const Variable& a, const Variable& exponent) {
  check_operands("pow", {{a, "the base"}, {exponent, "the exponent"}});
  return broadcast_binary(BinaryOp::kPow, "pow", a, exponent);
}

Variable pow(const Variable& x, float exponent) { return activation("pow", Activation::kPow, exponent, x); }
Variable exp(const Variable& x) { return activation("exp", Activation::kExp, 0.f, x); }
Variable log(const Variable& x) { return activation("log", Activation::kLog, 0.f, x); }
Variable sqrt(const Variable& x) { return activation("sqrt", Activation::kSqrt, 0.f, x); }
Variable rsqrt(const Variable& x) { return activation("rsqrt", Activation::kRsqrt, 0.f, x); }
Variable abs(const Variable& x) { return activation("abs", Activation::kAbs, 0.f, x); }
Variable neg(const Variable& x) { return affine(x, -1.f, 0.f); }

Variable cast(const Variable& x, DType dtype) {
  const Tensor tx = float_input("cast", x);
  DPL_CHECK(is_float_dtype(dtype), "cast: expected a float dtype to convert to (float32, bfloat16 or float16), got ",
            dtype);
  if (tx.dtype() == dtype) return x;
  Tensor out = tx.to(dtype);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<CastNode>();
  node->from = tx.dtype();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable clamp(const Variable& x, std::optional<float> min, std::optional<float> max) {
  const char* op = "clamp";
  DPL_CHECK(min.has_value() || max.has_value(), op, ": expected at least one of min and max, got neither");
  float_input(op, x);
  if (!min.has_value()) return activation(op, Activation::kClampMax, *max, x);
  if (!max.has_value()) return activation(op, Activation::kClampMin, *min, x);
  return activation(op, Activation::kClamp, *min, x, *max);
}

Variable where(const Tensor& cond, const Variable& a, const Variable& b) { return where_impl("where", cond, a, b); }

Variable masked_fill(const Variable& x, const Tensor& mask, float value) {
  const char* op = "masked_fill";
  check_operands(op, {{x, "an input"}});
  const Shape shape = broadcast_shapes(op, {&x.shape(), &mask.shape()});
  DPL_CHECK(shape == x.shape(), op, ": expected a mask that broadcasts to the input's shape ", shape_str(x.shape()),
            ", got ", shape_str(mask.shape()));
  const Variable fill(Tensor::full({}, value, TensorOptions(x.data().dtype(), x.data().device())));
  return where_impl(op, mask, fill, x);
}

Variable relu(const Variable& x) {
  const Tensor tx = float_input("relu", x);
  Tensor out = Tensor::empty_like(tx);
  backend::relu(tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ReluNode>();
  node->y = out;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable leaky_relu(const Variable& x, float slope) { return activation("leaky_relu", Activation::kLeakyRelu, slope, x); }
Variable sigmoid(const Variable& x) { return activation("sigmoid", Activation::kSigmoid, 0.f, x); }
Variable tanh(const Variable& x) { return activation("tanh", Activation::kTanh, 0.f, x); }
Variable gelu(const Variable& x, GeluApproximation approximate) {
  return activation("gelu", approximate == GeluApproximation::kTanh ? Activation::kGeluTanh : Activation::kGelu, 0.f,
                    x);
}

Variable dropout(const Variable& x, float p, Generator& gen, bool training) {
  const char* op = "dropout";
  DPL_CHECK(p >= 0.f && p < 1.f, op, ": expected a drop probability p in [0, 1), got ", p);
  const Tensor tx = float_input(op, x);
  if (!training || p == 0.f) return x;
  const std::uint64_t seed = gen.next_u64();
  Tensor out = Tensor::empty_like(tx);
  backend::dropout(p, seed, tx, 0.f, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<DropoutNode>();
  node->p = p;
  node->seed = seed;
  node->format = tx.memory_format();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable affine(const Variable& x, float a, float b) {
  const Tensor tx = float_input("affine", x);
  Tensor out = Tensor::empty_like(tx);
  backend::axpby(a, tx, 0.f, out);
  if (b != 0.f) {
    const Tensor shift = Tensor::full({1}, b, TensorOptions(tx.dtype(), tx.device()));
    backend::binary(BinaryOp::kAdd, Broadcast::kScalar, out, shift, 0.f, out);
  }
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<AffineNode>();
  node->a = a;
  node->format = tx.memory_format();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace dpl
