// Losses and metrics: softmax cross-entropy, accuracy and mean squared error.
#include <algorithm>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// Logits (N, C) and int32 labels (N,) in [0, C) on the logits' device.
void check_logits_labels(const char* op, const Variable& logits, const Tensor& labels) {
  check_operands(op, {{logits, "logits", 2, " (N, C)"}});
  const Tensor& tl = logits.data();
  DPL_CHECK(labels.defined(), op, ": expected labels, got an undefined tensor");
  DPL_CHECK(labels.dtype() == DType::kInt32, op, ": expected labels of dtype int32, got ", labels.dtype());
  DPL_CHECK(labels.dim() == 1 && labels.size(0) == tl.size(0), op, ": expected labels of shape (", tl.size(0),
            ",) for logits of shape ", shape_str(tl.shape()), ", got ", shape_str(labels.shape()));
  check_same_device(op, tl, "logits", labels, "labels");
  // Device labels are not read back here: that would make the host wait for the GPU on every
  // step. The CUDA loss turns an out-of-range label into NaN instead (see the header).
  if (labels.numel() == 0 || !labels.device().is_cpu()) return;
  const Tensor t = dense(labels);
  const std::int32_t* p = t.data<std::int32_t>();
  const auto [lo, hi] = std::minmax_element(p, p + t.numel());
  DPL_CHECK(*lo >= 0 && *hi < tl.size(1), op, ": expected labels in [0, ", tl.size(1), "), got values in [", *lo,
            ", ", *hi, "]");
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

class MseNode final : public Node {
 public:
  Tensor x, target;
  const char* name() const override { return "mse_loss"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const MemoryFormat f = x.memory_format();
    if (t[0].needed())
      write_in(t[0], f, [&](float beta, Tensor& gx) { backend::mse_backward(x, target, gy, 1.f, beta, gx); });
    if (t[1].needed())
      write_in(t[1], f, [&](float beta, Tensor& gt) { backend::mse_backward(x, target, gy, -1.f, beta, gt); });
  }
  void release() override { x = target = Tensor(); }
};

}  // namespace

Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing) {
  const char* op = "softmax_cross_entropy";
  DPL_CHECK(logits.defined(), op, ": expected logits (N, C), got an undefined Variable");
  DPL_CHECK(label_smoothing >= 0.f && label_smoothing < 1.f, op, ": expected label_smoothing in [0, 1), got ",
            label_smoothing);
  check_logits_labels(op, logits, labels);
  DPL_CHECK(logits.data().size(0) > 0, op, ": expected at least one row of logits, got shape ",
            shape_str(logits.shape()));
  const Tensor tl = dense(logits.data()), ty = dense(labels);
  Tensor probs = Tensor::empty_like(tl);
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
  check_logits_labels(op, logits, labels);
  const Tensor tl = dense(logits.data());
  Tensor out = empty_on({}, tl);
  backend::accuracy(tl, dense(labels), out);
  return out;
}

Variable mse_loss(const Variable& x, const Variable& target) {
  const char* op = "mse_loss";
  check_operands(op, {{x, "an input"}, {target, "a target"}});
  DPL_CHECK(x.shape() == target.shape(), op, ": expected a target of the input's shape ", shape_str(x.shape()),
            ", got ", shape_str(target.shape()));
  DPL_CHECK(x.numel() > 0, op, ": expected a non-empty input, got shape ", shape_str(x.shape()));
  const Tensor tx = dense_keep(x.data()), tt = in_format(target.data(), tx.memory_format());
  Tensor loss = empty_on({}, tx);
  backend::mse(tx, tt, loss);
  if (!any_requires_grad({&x, &target})) return Variable(loss);
  auto node = std::make_shared<MseNode>();
  node->x = tx;
  node->target = tt;
  node->set_inputs({x, target});
  return Variable::make_result(loss, node);
}

}  // namespace dpl
