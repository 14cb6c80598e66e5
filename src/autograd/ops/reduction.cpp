// Reductions: sum and mean over all elements; softmax, log_softmax and argmax over the last
// dimension (each leading index a row).
#include <algorithm>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

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
  const Tensor tx = float_input(name, x);  // a sum reads memory order, whatever the format
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

// --- softmax / log_softmax --------------------------------------------------------------------
class SoftmaxNode final : public Node {
 public:
  bool log = false;
  Tensor y;
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::softmax_backward(log, y, g, beta, gx); });
  }
  void release() override { y = Tensor(); }
};

Variable softmax_over_rows(const char* op, bool log, const Variable& x) {
  const Tensor tx = dense(float_input(op, x));  // rows: the last logical extent innermost
  DPL_CHECK(tx.dim() >= 1, op, ": expected an input with at least 1 dimension, got shape ", shape_str(tx.shape()));
  Tensor out = Tensor::empty_like(tx);
  backend::softmax(log, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SoftmaxNode>();
  node->log = log;
  node->y = out;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace

Variable sum(const Variable& x) { return reduce_all("sum", x, false); }
Variable mean(const Variable& x) { return reduce_all("mean", x, true); }

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

}  // namespace dpl
