// Losses and metrics: softmax cross-entropy (alone, and fused with the linear layer before it so
// that a language model's logits are never whole), accuracy, negative log-likelihood, and the
// pointwise losses (mean squared, L1, smooth L1, binary cross-entropy on probabilities and on logits).
#include <algorithm>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// int32 labels (rows,) in [0, classes) on the device of `like` (named like_name), whose rows
// they label.
void check_labels(const char* op, const Tensor& labels, std::int64_t classes, const Tensor& like,
                  const char* like_name) {
  DPL_CHECK(labels.defined(), op, ": expected labels, got an undefined tensor");
  DPL_CHECK(labels.dtype() == DType::kInt32, op, ": expected labels of dtype int32, got ", labels.dtype());
  DPL_CHECK(labels.dim() == 1 && labels.size(0) == like.size(0), op, ": expected labels of shape (", like.size(0),
            ",) for ", like_name, " of shape ", shape_str(like.shape()), ", got ", shape_str(labels.shape()));
  check_same_device(op, like, like_name, labels, "labels");
  // Device labels are not read back here: that would make the host wait for the GPU on every
  // step. The CUDA loss turns an out-of-range label into NaN instead (see the header).
  if (labels.numel() == 0 || !labels.device().is_cpu()) return;
  const Tensor t = dense(labels);
  const std::int32_t* p = t.data<std::int32_t>();
  const auto [lo, hi] = std::minmax_element(p, p + t.numel());
  DPL_CHECK(*lo >= 0 && *hi < classes, op, ": expected labels in [0, ", classes, "), got values in [", *lo, ", ", *hi,
            "]");
}

// Logits (N, C) and int32 labels (N,) in [0, C) on the logits' device.
void check_logits_labels(const char* op, const Variable& logits, const Tensor& labels) {
  check_operands(op, {{logits, "logits", 2, " (N, C)"}});
  check_labels(op, labels, logits.data().size(1), logits.data(), "logits");
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

// --- linear + softmax cross-entropy, a chunk of rows at a time ---------------------------------
// About this many bytes of logits per chunk when the caller does not choose: large enough that
// the chunk's matrix products run at full speed, small beside the (N, V) logits of a language
// model's batch (1.6 GB for GPT-2's 16k rows in bfloat16).
constexpr std::int64_t kChunkLogitsBytes = std::int64_t{256} << 20;

// The logits' gradient is kept times this while it is multiplied out: |softmax - target| <= 1, so
// float16 holds it below 32768 and well above its subnormals (unscaled, the gradient of a mean
// over N rows is what a loss scale exists to lift out of them). A power of 2: exact in every dtype.
constexpr double kLogitGradScale = 32768.0;

// Rows per chunk: the caller's count as given, else the fewest chunks of at most
// kChunkLogitsBytes of logits, with their rows spread evenly so the last chunk is not a sliver.
// Never more than 2^24 rows, so that kLogitGradScale times a chunk's rows is exact in float32.
std::int64_t chunk_rows_for(std::int64_t asked, std::int64_t rows, std::int64_t classes, DType dtype) {
  const auto row_bytes = classes * static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t most = std::min({asked > 0 ? asked : std::max<std::int64_t>(1, kChunkLogitsBytes / row_bytes),
                                      rows, std::int64_t{1} << 24});
  if (asked > 0) return most;
  const std::int64_t chunks = (rows + most - 1) / most;
  return (rows + chunks - 1) / chunks;
}

// The logits are gone by backward (each chunk's were overwritten by the next), so forward leaves
// the gradients for an upstream gradient of 1, in float32, and backward only scales them by the
// upstream gradient, which stays on the device (reading it back would stall the step and break
// CUDA-graph capture), rounding each once into its input's dtype. A float32 intermediate input's
// gradient is scaled in place and handed on as its buffer.
class LinearXentNode final : public Node {
 public:
  std::vector<Tensor> grads;  // float32, one per input in set_inputs' order; undefined where none is needed
  const char* name() const override { return "linear_cross_entropy"; }
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const Tensor g = dense(gy);
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!t[i].needed()) continue;
      Tensor& unit = grads[i];
      DPL_CHECK(unit.defined(), name(), ": a gradient was asked for input ", i, ", which forward found needing none");
      const auto scale = [&](float beta, Tensor& out) { backend::scale_by(unit, g, beta, out); };
      if (t[i].unallocated && !t[i].tensor->defined()) {
        if (unit.storage().use_count() == 1 && t[i].fits(unit)) {
          scale(0.f, unit);
          *t[i].tensor = unit;
          continue;
        }
        t[i].allocate();
      }
      write_in(t[i], MemoryFormat::kContiguous, scale);
    }
  }
  void release() override { grads.clear(); }
};

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

Variable linear_cross_entropy(const Variable& x, const Variable& weight, const Tensor& labels,
                              const LinearCrossEntropyOptions& options) {
  const char* op = "linear_cross_entropy";
  const Variable& bias = options.bias;
  check_operands(op, {{x, "an input", 2, " (N, C)"}, {weight, "a weight", 2, " (V, C)"}});
  const Tensor& x0 = x.data();
  const Tensor& w0 = weight.data();
  const std::int64_t n = x0.size(0), v = w0.size(0);
  DPL_CHECK(w0.size(1) == x0.size(1), op, ": expected a weight of shape (V, ", x0.size(1), ") for an input of shape ",
            shape_str(x0.shape()), ", got ", shape_str(w0.shape()));
  DPL_CHECK(n > 0, op, ": expected an input with at least one row, got shape ", shape_str(x0.shape()));
  DPL_CHECK(v > 0, op, ": expected a weight with at least one row (class), got shape ", shape_str(w0.shape()));
  if (bias.defined()) {
    check_operands(op, {{x, "an input"}, {bias, "a bias", 1, " (V,)"}});
    DPL_CHECK(bias.data().size(0) == v, op, ": expected a bias of shape (", v, ",) for a weight of shape ",
              shape_str(w0.shape()), ", got ", shape_str(bias.shape()));
  }
  const float smoothing = options.label_smoothing;
  DPL_CHECK(smoothing >= 0.f && smoothing < 1.f, op, ": expected label_smoothing in [0, 1), got ", smoothing);
  DPL_CHECK(options.chunk_rows >= 0, op, ": expected chunk_rows >= 0 (0: chosen from the logits' size), got ",
            options.chunk_rows);
  check_labels(op, labels, v, x0, "an input");

  const Tensor tx = dense(x0), tw = dense(w0), ty = dense(labels);
  const Tensor tb = bias.defined() ? dense(bias.data()) : Tensor();
  const bool want_x = any_requires_grad({&x}), want_w = any_requires_grad({&weight});
  const bool want_b = bias.defined() && any_requires_grad({&bias});
  const bool want = want_x || want_w || want_b;
  const std::int64_t rows = chunk_rows_for(options.chunk_rows, n, v, tx.dtype());
  const TensorOptions f32(kFloat32, tx.device());

  // One chunk's logits, reused by every chunk (the last may use fewer rows). The loss and the
  // gradients add up, and wait for backward, in float32: rounding each chunk's share to 16 bits
  // would lose what later chunks add to a 16-bit sum, and the gradients for a unit upstream
  // gradient are far smaller than the ones a loss scale makes (float16 would flush them to zero).
  Tensor logits = empty_on({rows, v}, tx);
  Tensor lse = Tensor::empty({rows}, f32), chunk_loss = Tensor::empty({1}, f32), total = Tensor::empty({1}, f32);
  Tensor gx, gw, gb, ones;
  if (want_x) gx = Tensor::empty({n, x0.size(1)}, f32);
  if (want_w) gw = Tensor::empty({v, x0.size(1)}, f32);
  if (want_b) {
    gb = Tensor::empty({1, v}, f32);
    ones = empty_on({rows}, tx);
    backend::fill(ones, 1.0);
  }
  // The kernel divides its gradient scale by the chunk's rows; scales[k] (k = 1 for a shorter
  // last chunk) cancels that and leaves the logits' gradient times kLogitGradScale.
  const std::int64_t last = n - (n - 1) / rows * rows;
  Tensor scales[2];
  for (int k = 0; k < 2 && want; ++k) {
    scales[k] = Tensor::empty({1}, f32);
    backend::fill(scales[k], kLogitGradScale * static_cast<double>(k == 0 ? rows : last));
  }
  const auto alpha = static_cast<float>(1.0 / (kLogitGradScale * static_cast<double>(n)));
  for (std::int64_t start = 0; start < n; start += rows) {
    const std::int64_t m = std::min(rows, n - start);
    const Tensor xc = tx.narrow(0, start, m), yc = ty.narrow(0, start, m);
    Tensor lc = logits.narrow(0, 0, m), lse_c = lse.narrow(0, 0, m);
    if (tb.defined()) backend::linear_bias(xc, tw, tb, lc);
    else backend::gemm(false, true, 1.f, xc, tw, 0.f, lc);
    // With gradients wanted, lc = kLogitGradScale * (softmax - target) after the loss, in the same
    // pass; alpha = 1 / (kLogitGradScale * N) makes the products the gradients of the whole mean.
    if (want) backend::softmax_xent_and_grad(lc, yc, smoothing, scales[m == rows ? 0 : 1], lse_c, chunk_loss);
    else backend::softmax_xent(lc, yc, smoothing, lse_c, chunk_loss);
    // The kernel takes the chunk's mean; its share of the rows makes it the whole mean's part.
    const float beta = start == 0 ? 0.f : 1.f;
    backend::axpby(static_cast<float>(static_cast<double>(m) / static_cast<double>(n)), chunk_loss, beta, total);
    if (!want) continue;
    if (want_x) {
      Tensor gxc = gx.narrow(0, start, m);
      backend::gemm(false, false, alpha, lc, tw, 0.f, gxc);
    }
    if (want_w) backend::gemm(true, false, alpha, lc, xc, beta, gw);
    if (want_b) backend::gemm(false, false, alpha, ones.narrow(0, 0, m).reshape({1, m}), lc, beta, gb);
  }
  Tensor loss = total.reshape({});
  if (tx.dtype() != kFloat32) {
    loss = empty_on({}, tx);
    backend::cast(total.reshape({}), loss);
  }
  if (!want) return Variable(loss);
  auto node = std::make_shared<LinearXentNode>();
  node->grads = {gx, gw};
  if (bias.defined()) node->grads.push_back(want_b ? gb.reshape({v}) : Tensor());
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
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
