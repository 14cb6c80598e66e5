// Elementwise ops: add, sub and mul with their broadcasts, relu and the other activations,
// dropout, and the scalar affine map. All work in memory order and keep their input's format.
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
  MemoryFormat format;  // of the forward's operands and output
  Tensor a, b;          // saved for mul only
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
          Tensor prod = Tensor::empty_like(g);
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
  check_operands(name, {{a, "the first operand"}, {b, "the second operand"}});
  const Broadcast bc = broadcast_of(name, a.data(), b.data());
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
  Tensor saved;  // the input or the output, as backend::backward_reads_output(f) says
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const MemoryFormat format = saved.memory_format();
    const Tensor g = in_format(gy, format);
    write_in(t[0], format, [&](float beta, Tensor& gx) { backend::activation_backward(f, slope, saved, g, beta, gx); });
  }
  void release() override { saved = Tensor(); }
};

Variable activation(const char* op, Activation f, float slope, const Variable& x) {
  const Tensor tx = float_input(op, x);
  Tensor out = Tensor::empty_like(tx);
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

}  // namespace

Variable add(const Variable& a, const Variable& b) { return binary(BinaryOp::kAdd, "add", a, b); }
Variable sub(const Variable& a, const Variable& b) { return binary(BinaryOp::kSub, "sub", a, b); }
Variable mul(const Variable& a, const Variable& b) { return binary(BinaryOp::kMul, "mul", a, b); }

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
Variable gelu(const Variable& x) { return activation("gelu", Activation::kGelu, 0.f, x); }

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
