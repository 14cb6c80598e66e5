// Losses and metrics: softmax cross-entropy, accuracy, negative log-likelihood, and the pointwise
// losses (mean squared, L1, smooth L1, binary cross-entropy on probabilities and on logits).
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

// Keeps the logits and each row's log-sum-exp, and recomputes the probabilities in backward. When
// the graph is all that still holds the logits (the usual case for a language model's head), their
// gradient is written over them and handed on as the buffer, so the loss costs no tensor of the
// logits' size beyond the logits themselves.
class SoftmaxXentNode final : public Node {
 public:
  Tensor logits, lse, labels;
  float smoothing = 0.f;
  const char* name() const override { return "softmax_cross_entropy"; }
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    Tensor& buffer = *t[0].tensor;
    if (t[0].unallocated && !buffer.defined()) {
      // use_count 1: this node's copy of the view is the only one, so nothing can read the logits again.
      if (logits.storage().use_count() == 1 && t[0].fits(logits)) {
        backend::softmax_xent_backward(logits, labels, lse, smoothing, gy, 0.f, logits);
        buffer = logits;
        return;
      }
      t[0].allocate();
    }
    backend::softmax_xent_backward(logits, labels, lse, smoothing, gy, t[0].beta, buffer);
  }
  void release() override { logits = lse = labels = Tensor(); }
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

backend::LossReduction backend_reduction(Reduction r) {
  switch (r) {
    case Reduction::kNone: return backend::LossReduction::kNone;
    case Reduction::kSum: return backend::LossReduction::kSum;
    case Reduction::kMean: break;
  }
  return backend::LossReduction::kMean;
}

// --- pointwise losses ---------------------------------------------------------------------------
// Computed contiguous. The gradient for the target (mse, l1, smooth l1) is the input's negated.
class PointwiseLossNode final : public Node {
 public:
  const char* op = "";
  backend::PointwiseLoss kind = backend::PointwiseLoss::kMse;
  float param = 0.f;
  backend::LossReduction reduction = backend::LossReduction::kMean;
  Tensor x, target, pos_weight;
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = dense(gy);
    const float alpha = reduction == backend::LossReduction::kMean ? 1.f / static_cast<float>(x.numel()) : 1.f;
    const Tensor* pw = pos_weight.defined() ? &pos_weight : nullptr;
    for (std::size_t k = 0; k < t.size(); ++k) {
      if (!t[k].needed()) continue;
      write_in(t[k], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) {
        backend::pointwise_loss_backward(kind, param, x, target, pw, g, k == 0 ? alpha : -alpha, beta, gx);
      });
    }
  }
  void release() override { x = target = pos_weight = Tensor(); }
};

Variable pointwise_loss(const char* op, backend::PointwiseLoss kind, float param, const Variable& x,
                        const Variable& target, Reduction reduction, const Tensor& pos_weight = Tensor()) {
  DPL_CHECK(!target.defined() || target.data().defined(), op, ": expected a target, got an undefined tensor");
  check_operands(op, {{x, "an input"}, {target, "a target"}});
  DPL_CHECK(x.shape() == target.shape(), op, ": expected a target of the input's shape ", shape_str(x.shape()),
            ", got ", shape_str(target.shape()));
  DPL_CHECK(reduction == Reduction::kNone || x.numel() > 0, op, ": expected a non-empty input, got shape ",
            shape_str(x.shape()));
  const Tensor tx = dense(x.data()), tt = dense(target.data());
  Tensor pw;
  if (pos_weight.defined()) {
    const std::int64_t last = tx.dim() ? tx.size(-1) : 1;
    DPL_CHECK(pos_weight.dim() == 1 && (pos_weight.numel() == 1 || pos_weight.numel() == last), op,
              ": expected a pos_weight of shape (1,) or (", last, ",) (one per class of the last dimension), got ",
              shape_str(pos_weight.shape()));
    DPL_CHECK(pos_weight.dtype() == tx.dtype(), op, ": expected a pos_weight of the input's dtype ", tx.dtype(),
              ", got ", pos_weight.dtype());
    check_same_device(op, tx, "an input", pos_weight, "pos_weight");
    pw = dense(pos_weight);
  }
  const backend::LossReduction r = backend_reduction(reduction);
  Tensor out = empty_on(r == backend::LossReduction::kNone ? tx.shape() : Shape{}, tx);
  backend::pointwise_loss(kind, param, tx, tt, pw.defined() ? &pw : nullptr, r, out);
  if (!any_requires_grad({&x, &target})) return Variable(out);
  auto node = std::make_shared<PointwiseLossNode>();
  node->op = op;
  node->kind = kind;
  node->param = param;
  node->reduction = r;
  node->x = tx;
  node->target = tt;
  node->pos_weight = pw;
  node->set_inputs({x, target});
  return Variable::make_result(out, node);
}

// --- negative log-likelihood --------------------------------------------------------------------
class NllNode final : public Node {
 public:
  Tensor labels, total;
  std::int64_t ignore_index = -100;
  backend::LossReduction reduction = backend::LossReduction::kMean;
  Shape view;  // log_probs as (N, C, K)
  const char* name() const override { return "nll_loss"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) {
      Tensor g3 = gx.reshape(view);
      backend::nll_loss_backward(labels, ignore_index, reduction, g, total, beta, g3);
    });
  }
  void release() override { labels = total = Tensor(); }
};

// The label range check of host labels; device labels are not read back (see nll_loss's doc).
template <typename L>
void check_label_range(const char* op, const Tensor& labels, std::int64_t classes, std::int64_t ignore_index) {
  const L* p = labels.data<L>();
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    const auto v = static_cast<std::int64_t>(p[i]);
    DPL_CHECK(v == ignore_index || (v >= 0 && v < classes), op, ": expected labels in [0, ", classes,
              ") or ignore_index ", ignore_index, ", got ", v, " at flat index ", i);
  }
}

}  // namespace

Variable nll_loss(const Variable& log_probs, const Tensor& labels, std::int64_t ignore_index, Reduction reduction) {
  const char* op = "nll_loss";
  check_operands(op, {{log_probs, "log-probabilities"}});
  const Tensor tl = dense(log_probs.data());
  DPL_CHECK(tl.dim() >= 2, op, ": expected log-probabilities (N, C) or (N, C, d1, ...), got shape ",
            shape_str(tl.shape()));
  DPL_CHECK(labels.defined(), op, ": expected labels, got an undefined tensor");
  DPL_CHECK(labels.dtype() == kInt32 || labels.dtype() == kInt64, op, ": expected labels of dtype int32 or int64, got ",
            labels.dtype());
  Shape want = tl.shape();
  want.erase(want.begin() + 1);
  DPL_CHECK(labels.shape() == want, op, ": expected labels of shape ", shape_str(want),
            " for log-probabilities of shape ", shape_str(tl.shape()), ", got ", shape_str(labels.shape()));
  check_same_device(op, tl, "log-probabilities", labels, "labels");
  const Tensor ty = dense(labels);
  const std::int64_t classes = tl.size(1);
  if (ty.device().is_cpu()) {
    if (ty.dtype() == kInt64) check_label_range<std::int64_t>(op, ty, classes, ignore_index);
    else check_label_range<std::int32_t>(op, ty, classes, ignore_index);
  }
  const std::int64_t n = tl.size(0), inner = classes == 0 ? 0 : tl.numel() / (n * classes);
  const Shape view{n, classes, n * classes == 0 ? 1 : inner};
  const backend::LossReduction r = backend_reduction(reduction);
  Tensor out = empty_on(r == backend::LossReduction::kNone ? want : Shape{}, tl);
  Tensor total = Tensor::empty({1}, TensorOptions(kFloat32, tl.device()));
  backend::nll_loss(tl.reshape(view), ty, ignore_index, r, out, total);
  if (!any_requires_grad({&log_probs})) return Variable(out);
  auto node = std::make_shared<NllNode>();
  node->labels = ty;
  node->total = total;
  node->ignore_index = ignore_index;
  node->reduction = r;
  node->view = view;
  node->set_inputs({log_probs});
  return Variable::make_result(out, node);
}

Variable l1_loss(const Variable& x, const Variable& target, Reduction reduction) {
  return pointwise_loss("l1_loss", backend::PointwiseLoss::kL1, 0.f, x, target, reduction);
}

Variable smooth_l1_loss(const Variable& x, const Variable& target, Reduction reduction, float beta) {
  DPL_CHECK(beta >= 0.f, "smooth_l1_loss: expected beta >= 0, got ", beta);
  return pointwise_loss("smooth_l1_loss", backend::PointwiseLoss::kSmoothL1, beta, x, target, reduction);
}

Variable binary_cross_entropy(const Variable& x, const Tensor& target, Reduction reduction) {
  return pointwise_loss("binary_cross_entropy", backend::PointwiseLoss::kBce, 0.f, x, Variable(target), reduction);
}

Variable binary_cross_entropy_with_logits(const Variable& logits, const Tensor& target, Reduction reduction,
                                          const Tensor& pos_weight) {
  return pointwise_loss("binary_cross_entropy_with_logits", backend::PointwiseLoss::kBceWithLogits, 0.f, logits,
                        Variable(target), reduction, pos_weight);
}

Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, float label_smoothing) {
  const char* op = "softmax_cross_entropy";
  DPL_CHECK(logits.defined(), op, ": expected logits (N, C), got an undefined Variable");
  DPL_CHECK(label_smoothing >= 0.f && label_smoothing < 1.f, op, ": expected label_smoothing in [0, 1), got ",
            label_smoothing);
  check_logits_labels(op, logits, labels);
  DPL_CHECK(logits.data().size(0) > 0, op, ": expected at least one row of logits, got shape ",
            shape_str(logits.shape()));
  const Tensor tl = dense(logits.data()), ty = dense(labels);
  Tensor lse = Tensor::empty({tl.size(0)}, TensorOptions(kFloat32, tl.device()));
  Tensor loss = empty_on({}, tl);
  backend::softmax_xent(tl, ty, label_smoothing, lse, loss);
  if (!any_requires_grad({&logits})) return Variable(loss);
  auto node = std::make_shared<SoftmaxXentNode>();
  node->logits = tl;
  node->lse = lse;
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

Variable mse_loss(const Variable& x, const Variable& target, Reduction reduction) {
  const char* op = "mse_loss";
  if (reduction != Reduction::kMean) return pointwise_loss(op, backend::PointwiseLoss::kMse, 0.f, x, target, reduction);
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
