// matmul and linear: GEMMs, with the transposed GEMMs of their gradients.
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

}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  const char* op = "matmul";
  check_operands(op, {{a, "the first operand", 2, " (N, K)"}, {b, "the second operand", 2, " (K, M)"}});
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
  check_operands(op, {{x, "an input", 2, " (N, in)"}, {weight, "a weight", 2, " (out, in)"}});
  const std::int64_t in = weight.data().size(1), outf = weight.data().size(0);
  DPL_CHECK(x.data().size(1) == in, op, ": expected an input of shape (N, ", in, ") for a weight of shape ",
            shape_str(weight.shape()), ", got ", shape_str(x.shape()));
  if (bias.defined()) {
    check_operands(op, {{x, "an input"}, {bias, "a bias"}});
    DPL_CHECK(bias.data().dim() == 1 && bias.data().size(0) == outf, op, ": expected a bias of shape (", outf,
              ",), got ", shape_str(bias.shape()));
  }
  const Tensor tx = dense(x.data()), tw = dense(weight.data());
  Tensor out = empty_on({tx.size(0), outf}, tx);
  backend::gemm(false, true, 1.f, tx, tw, 0.f, out);
  if (bias.defined())
    backend::binary(backend::BinaryOp::kAdd, backend::Broadcast::kRow, out, dense(bias.data()), 0.f, out);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(out);
  auto node = std::make_shared<LinearNode>();
  node->x = tx;
  node->w = tw;
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(out, node);
}

}  // namespace dpl
