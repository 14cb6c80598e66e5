// matmul, bmm, linear and gelu_mlp: GEMMs, with the transposed GEMMs of their gradients. The N-D
// forms of matmul and linear are composed of the shape ops (views where the strides allow) around
// the 2-D GEMM or the batched one, so their gradients come from those ops' nodes.
#include <algorithm>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

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

// a and b as the batched GEMM reads them: each either dense or the dense transpose of its
// operand (ta, tb), so that op(a) op(b) is the product.
class BmmNode final : public Node {
 public:
  Tensor a, b;
  bool ta = false, tb = false;
  const char* name() const override { return "bmm"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::gemm_batched(false, !tb, 1.f, gy, b, t[0].beta, *t[0].tensor);  // ga = gy op(b)^T
    if (t[1].needed()) backend::gemm_batched(!ta, false, 1.f, a, gy, t[1].beta, *t[1].tensor);  // gb = op(a)^T gy
  }
  void release() override { a = b = Tensor(); }
};

// x (B, R, C) as a batched GEMM operand: x itself when contiguous; when x is the transposed view
// of a contiguous (B, C, R) tensor (as k.transpose(1, 2) in attention), that tensor, with
// `transposed` set, so that the GEMM reads it in place; else a contiguous copy.
Tensor gemm_operand(const Tensor& x, bool& transposed) {
  transposed = false;
  if (x.is_contiguous()) return x;
  const Strides& st = x.strides();
  const Shape& s = x.shape();
  if (st[2] == s[1] && st[1] == 1 && (s[0] == 1 || st[0] == s[1] * s[2])) {
    transposed = true;
    return Tensor(x.storage(), x.offset(), {s[0], s[2], s[1]}, {s[1] * s[2], s[1], 1}, x.dtype());
  }
  return dense(x);
}

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

void check_inner(const char* op, const Variable& a, const Variable& b, std::int64_t ka, std::int64_t kb) {
  DPL_CHECK(ka == kb, op, ": inner extents differ: ", shape_str(a.shape()), " x ", shape_str(b.shape()),
            "; expected the second operand to have ", ka, " rows");
}

// The 2-D product, as fast as a single GEMM call.
Variable matmul_2d(const Variable& a, const Variable& b) {
  const char* op = "matmul";
  check_inner(op, a, b, a.data().size(1), b.data().size(0));
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

// The broadcast of two batch shapes (PyTorch's rules), refused when an extent pair is neither
// equal nor has a 1.
Shape broadcast_batch(const Variable& a, const Variable& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const std::size_t na = sa.size() - 2, nb = sb.size() - 2, n = std::max(na, nb);
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t ea = i + na >= n ? sa[i + na - n] : 1, eb = i + nb >= n ? sb[i + nb - n] : 1;
    DPL_CHECK(ea == eb || ea == 1 || eb == 1, "matmul: the batch dimensions of ", shape_str(sa), " and ",
              shape_str(sb), " do not broadcast (extents ", ea, " and ", eb, ")");
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

// x (..., R, C) broadcast to the batch shape and folded to (B, R, C): a view when nothing is
// repeated and x's strides allow it, else a copy.
Variable as_batch(const Variable& x, const Shape& batch) {
  Shape full = batch;
  full.push_back(x.data().size(-2));
  full.push_back(x.data().size(-1));
  return reshape(expand(x, full), {-1, full[full.size() - 2], full.back()});
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  const char* op = "matmul";
  check_operands(op, {{a, "the first operand"}, {b, "the second operand"}});
  const std::int64_t ra = a.data().dim(), rb = b.data().dim();
  DPL_CHECK(ra >= 1 && rb >= 1, op, ": expected operands of at least one dimension, got shapes ", shape_str(a.shape()),
            " and ", shape_str(b.shape()));
  if (ra == 2 && rb == 2) return matmul_2d(a, b);
  const std::int64_t k = a.data().size(-1);
  check_inner(op, a, b, k, b.data().size(rb == 1 ? 0 : -2));
  if (ra == 1 && rb == 1) return reshape(matmul_2d(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  if (ra == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (rb == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  const std::int64_t m = b.data().size(-1);
  if (rb == 2) {
    // A batch times one matrix is one GEMM over the folded batch, as in PyTorch.
    Shape out_shape = a.shape();
    out_shape.back() = m;
    return reshape(matmul_2d(reshape(a, {-1, k}), b), out_shape);
  }
  const Shape batch = broadcast_batch(a, b);
  Shape out_shape = batch;
  out_shape.push_back(a.data().size(-2));
  out_shape.push_back(m);
  return reshape(bmm(as_batch(a, batch), as_batch(b, batch)), out_shape);
}

Variable bmm(const Variable& a, const Variable& b) {
  const char* op = "bmm";
  check_operands(op, {{a, "the first operand", 3, " (B, N, K)"}, {b, "the second operand", 3, " (B, K, M)"}});
  DPL_CHECK(a.data().size(0) == b.data().size(0), op, ": batch extents differ: ", shape_str(a.shape()), " x ",
            shape_str(b.shape()));
  check_inner(op, a, b, a.data().size(2), b.data().size(1));
  bool trans_a = false, trans_b = false;
  const Tensor ta = gemm_operand(a.data(), trans_a), tb = gemm_operand(b.data(), trans_b);
  Tensor out = empty_on({a.data().size(0), a.data().size(1), b.data().size(2)}, ta);
  backend::gemm_batched(trans_a, trans_b, 1.f, ta, tb, 0.f, out);
  if (!any_requires_grad({&a, &b})) return Variable(out);
  auto node = std::make_shared<BmmNode>();
  node->a = ta;
  node->b = tb;
  node->ta = trans_a;
  node->tb = trans_b;
  node->set_inputs({a, b});
  return Variable::make_result(out, node);
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  const char* op = "linear";
  check_operands(op, {{x, "an input", -1, " (..., in)"}, {weight, "a weight", 2, " (out, in)"}});
  const std::int64_t in = weight.data().size(1), outf = weight.data().size(0);
  DPL_CHECK(x.data().dim() >= 1 && x.data().size(-1) == in, op, ": expected an input of shape (..., ", in,
            ") for a weight of shape ", shape_str(weight.shape()), ", got ", shape_str(x.shape()));
  if (x.data().dim() != 2) {
    // Any leading dimensions fold into the rows of one GEMM.
    Shape out_shape = x.shape();
    out_shape.back() = outf;
    return reshape(linear(reshape(x, {-1, in}), weight, bias), out_shape);
  }
  if (bias.defined()) {
    check_operands(op, {{x, "an input"}, {bias, "a bias"}});
    DPL_CHECK(bias.data().dim() == 1 && bias.data().size(0) == outf, op, ": expected a bias of shape (", outf,
              ",), got ", shape_str(bias.shape()));
  }
  const Tensor tx = dense(x.data()), tw = dense(weight.data());
  Tensor out = empty_on({tx.size(0), outf}, tx);
  if (bias.defined()) backend::linear_bias(tx, tw, dense(bias.data()), out);
  else backend::gemm(false, true, 1.f, tx, tw, 0.f, out);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(out);
  auto node = std::make_shared<LinearNode>();
  node->x = tx;
  node->w = tw;
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(out, node);
}

namespace {

// Saves the input, both weights and the hidden layer before (pre) and after (h) the activation.
// Backward takes W2's gradients from gy and h first, so that h is freed before the hidden
// layer's gradient is made.
class GeluMlpNode final : public Node {
 public:
  Tensor x, w1, pre, h, w2;
  const char* name() const override { return "gelu_mlp"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[3].needed()) backend::gemm(true, false, 1.f, gy, h, t[3].beta, *t[3].tensor);  // gW2 = gy^T h
    if (t[4].needed()) backend::sum_rows(1.f, gy, t[4].beta, *t[4].tensor);               // gb2 = sum_rows gy
    h = Tensor();
    if (!(t[0].needed() || t[1].needed() || t[2].needed())) return;
    // dpre = gelu'(pre) * (gy W2), and gb1 = sum_rows dpre, in one product.
    Tensor dpre = Tensor::empty_like(pre);
    backend::gemm_dgelu_bgrad(gy, w2, pre, dpre, t[2].needed() ? t[2].beta : 0.f,
                              t[2].needed() ? t[2].tensor : nullptr);
    pre = Tensor();
    if (t[0].needed()) backend::gemm(false, false, 1.f, dpre, w1, t[0].beta, *t[0].tensor);  // gx = dpre W1
    if (t[1].needed()) backend::gemm(true, false, 1.f, dpre, x, t[1].beta, *t[1].tensor);   // gW1 = dpre^T x
  }
  void release() override { x = w1 = pre = h = w2 = Tensor(); }
};

}  // namespace

Variable gelu_mlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2) {
  const char* op = "gelu_mlp";
  check_operands(op, {{x, "an input", -1, " (..., in)"},
                      {w1, "a first weight", 2, " (hidden, in)"},
                      {w2, "a second weight", 2, " (out, hidden)"}});
  const std::int64_t in = w1.data().size(1), hidden = w1.data().size(0), outf = w2.data().size(0);
  DPL_CHECK(x.data().dim() >= 1 && x.data().size(-1) == in, op, ": expected an input of shape (..., ", in,
            ") for a first weight of shape ", shape_str(w1.shape()), ", got ", shape_str(x.shape()));
  DPL_CHECK(w2.data().size(1) == hidden, op, ": expected a second weight of shape (out, ", hidden,
            ") for a first weight of shape ", shape_str(w1.shape()), ", got ", shape_str(w2.shape()));
  if (!b1.defined() || !b2.defined()) return linear(gelu(linear(x, w1, b1), GeluApproximation::kTanh), w2, b2);
  check_operands(op, {{x, "an input"}, {b1, "a first bias"}, {b2, "a second bias"}});
  DPL_CHECK(b1.data().dim() == 1 && b1.data().size(0) == hidden, op, ": expected a first bias of shape (", hidden,
            ",), got ", shape_str(b1.shape()));
  DPL_CHECK(b2.data().dim() == 1 && b2.data().size(0) == outf, op, ": expected a second bias of shape (", outf,
            ",), got ", shape_str(b2.shape()));
  if (x.data().dim() != 2) {
    // Any leading dimensions fold into the rows of the products.
    Shape out_shape = x.shape();
    out_shape.back() = outf;
    return reshape(gelu_mlp(reshape(x, {-1, in}), w1, b1, w2, b2), out_shape);
  }
  const Tensor tx = dense(x.data()), tw1 = dense(w1.data()), tw2 = dense(w2.data());
  Tensor pre = empty_on({tx.size(0), hidden}, tx), h = empty_on({tx.size(0), hidden}, tx);
  backend::linear_bias_gelu(tx, tw1, dense(b1.data()), h, pre);
  Tensor out = empty_on({tx.size(0), outf}, tx);
  backend::linear_bias(h, tw2, dense(b2.data()), out);
  if (!any_requires_grad({&x, &w1, &b1, &w2, &b2})) return Variable(out);
  auto node = std::make_shared<GeluMlpNode>();
  node->x = tx;
  node->w1 = tw1;
  node->pre = pre;
  node->h = h;
  node->w2 = tw2;
  node->set_inputs({x, w1, b1, w2, b2});
  return Variable::make_result(out, node);
}

}  // namespace dpl
