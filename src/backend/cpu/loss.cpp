// Softmax cross-entropy, accuracy, the pointwise losses and the negative log-likelihood on the CPU.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu.hpp"
#include "backend/loss_math.hpp"

namespace dpl::backend::cpu {

namespace {

void softmax_xent_cpu(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss) {
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  const float* x = logits.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  float* l = lse.data<float>();
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (logits.numel() > kParallelGrain) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < cols; ++j) mx = std::max(mx, xr[j]);
    float s = 0.f, row_sum = 0.f;
    for (std::int64_t j = 0; j < cols; ++j) {
      s += std::exp(xr[j] - mx);
      row_sum += xr[j];
    }
    l[r] = std::log(s) + mx;
    // log-sum-exp form keeps the loss finite when the true class's probability underflows.
    // With smoothing the target puts smoothing / C on every class: the loss subtracts that share
    // of the row's logits from the log-sum-exp.
    const float smoothed = smoothing == 0.f ? 0.f : smoothing / static_cast<float>(cols) * row_sum;
    total += static_cast<double>(l[r] - (1.f - smoothing) * xr[t[r]] - smoothed);
  }
  loss.data<float>()[0] = rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.f;
}

// glogits may be logits (beta 0): each element is read before it is written.
void softmax_xent_backward_cpu(const Tensor& logits, const Tensor& labels, const Tensor& lse, float smoothing,
                               const Tensor& gloss, float beta, Tensor& glogits) {
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  const float* x = logits.data<float>();
  const float* l = lse.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  float* g = glogits.data<float>();
  const float scale = rows ? gloss.data<float>()[0] / static_cast<float>(rows) : 0.f;
  const float uniform = smoothing / static_cast<float>(cols);
#pragma omp parallel for if (logits.numel() > kParallelGrain) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t i = r * cols + j;
      const float v = scale * (std::exp(x[i] - l[r]) - (j == t[r] ? 1.f - smoothing : 0.f) - uniform);
      g[i] = (beta == 0.f ? 0.f : g[i]) + v;
    }
  }
}

// The two kernels one after the other: on the CPU a second pass costs no memory traffic worth
// fusing away.
void softmax_xent_and_grad_cpu(Tensor& logits, const Tensor& labels, float smoothing, const Tensor& gloss, Tensor& lse,
                               Tensor& loss) {
  softmax_xent_cpu(logits, labels, smoothing, lse, loss);
  softmax_xent_backward_cpu(logits, labels, lse, smoothing, gloss, 0.f, logits);
}

void accuracy_cpu(const Tensor& logits, const Tensor& labels, Tensor& out) {
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  const float* x = logits.data<float>();
  const std::int32_t* t = labels.data<std::int32_t>();
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < cols; ++j)
      if (x[r * cols + j] > x[r * cols + best]) best = j;
    correct += best == t[r];
  }
  out.data<float>()[0] = rows ? static_cast<float>(correct) / static_cast<float>(rows) : 0.f;
}

// --- pointwise losses ---------------------------------------------------------------------------

// pos_weight as float32 values and the count they cycle over (1 or the last extent), or {} for 1.
struct PosWeight {
  Tensor values;
  std::int64_t n = 0;
  float at(std::int64_t i) const { return n == 0 ? 1.f : values.data<float>()[n == 1 ? 0 : i % n]; }
};
PosWeight pos_weight_of(const Tensor* w) {
  if (w == nullptr) return {};
  return {w->dtype() == kFloat32 ? *w : w->to(kFloat32), w->numel()};
}

void pointwise_loss_cpu(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                        const Tensor* pos_weight, LossReduction reduction, Tensor& out) {
  const float* px = x.data<float>();
  const float* pt = target.data<float>();
  const PosWeight w = pos_weight_of(pos_weight);
  const std::int64_t n = x.numel();
  float* po = out.data<float>();
  if (reduction == LossReduction::kNone) {
    for_each_index(n, [&](std::int64_t i) { po[i] = pointwise_loss_value(kind, param, px[i], pt[i], w.at(i)); });
    return;
  }
  double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) if (n > kParallelGrain) schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    acc += static_cast<double>(pointwise_loss_value(kind, param, px[i], pt[i], w.at(i)));
  if (reduction == LossReduction::kMean) acc /= static_cast<double>(n);  // 0/0: NaN for an empty input, as PyTorch
  po[0] = static_cast<float>(acc);
}

void pointwise_loss_backward_cpu(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                                 const Tensor* pos_weight, const Tensor& gy, float alpha, float beta, Tensor& g) {
  const float* px = x.data<float>();
  const float* pt = target.data<float>();
  const float* pg = gy.data<float>();
  const bool scalar = gy.numel() == 1;
  const PosWeight w = pos_weight_of(pos_weight);
  float* po = g.data<float>();
  for_each_index(x.numel(), [&](std::int64_t i) {
    const float v = alpha * pg[scalar ? 0 : i] * pointwise_loss_derivative(kind, param, px[i], pt[i], w.at(i));
    po[i] = beta == 0.f ? v : po[i] + v;
  });
}

// --- negative log-likelihood ----------------------------------------------------------------

template <typename L>
void nll_typed(const Tensor& logp, const L* labels, std::int64_t ignore, LossReduction reduction, Tensor& out,
               Tensor& total) {
  const std::int64_t rows = logp.size(0), classes = logp.size(1), inner = logp.size(2);
  const float* p = logp.data<float>();
  float* po = out.data<float>();
  double sum = 0.0;
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t k = 0; k < inner; ++k) {
      const auto label = static_cast<std::int64_t>(labels[r * inner + k]);
      float v = 0.f;
      if (label != ignore) {
        v = label >= 0 && label < classes ? -p[(r * classes + label) * inner + k] : std::nanf("");
        ++count;
      }
      if (reduction == LossReduction::kNone) po[r * inner + k] = v;
      else sum += static_cast<double>(v);
    }
  }
  total.data<float>()[0] = static_cast<float>(count);
  if (reduction == LossReduction::kSum) po[0] = static_cast<float>(sum);
  if (reduction == LossReduction::kMean) po[0] = static_cast<float>(sum / static_cast<double>(count));
}

void nll_loss_cpu(const Tensor& logp, const Tensor& labels, std::int64_t ignore_index, LossReduction reduction,
                  Tensor& out, Tensor& total) {
  if (labels.dtype() == kInt64) nll_typed(logp, labels.data<std::int64_t>(), ignore_index, reduction, out, total);
  else nll_typed(logp, labels.data<std::int32_t>(), ignore_index, reduction, out, total);
}

template <typename L>
void nll_backward_typed(const L* labels, std::int64_t ignore, LossReduction reduction, const Tensor& gy,
                        const Tensor& total, float beta, Tensor& glogp) {
  const std::int64_t classes = glogp.size(1), inner = glogp.size(2);
  const float* pg = gy.data<float>();
  const float scale = reduction == LossReduction::kMean ? 1.f / total.data<float>()[0] : 1.f;
  float* po = glogp.data<float>();
  for_each_index(glogp.numel(), [&](std::int64_t e) {
    const std::int64_t k = e % inner, c = (e / inner) % classes, r = e / (inner * classes);
    const auto label = static_cast<std::int64_t>(labels[r * inner + k]);
    const float g = reduction == LossReduction::kNone ? pg[r * inner + k] : pg[0] * scale;
    const float v = label != ignore && label == c ? -g : 0.f;
    po[e] = beta == 0.f ? v : po[e] + v;
  });
}

void nll_loss_backward_cpu(const Tensor& labels, std::int64_t ignore_index, LossReduction reduction, const Tensor& gy,
                           const Tensor& total, float beta, Tensor& glogp) {
  if (labels.dtype() == kInt64)
    nll_backward_typed(labels.data<std::int64_t>(), ignore_index, reduction, gy, total, beta, glogp);
  else nll_backward_typed(labels.data<std::int32_t>(), ignore_index, reduction, gy, total, beta, glogp);
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(pointwise_loss, pointwise_loss_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(pointwise_loss_backward, pointwise_loss_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(nll_loss, nll_loss_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(nll_loss_backward, nll_loss_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_xent, softmax_xent_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_xent_backward, softmax_xent_backward_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(softmax_xent_and_grad, softmax_xent_and_grad_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(accuracy, accuracy_cpu);

}  // namespace dpl::backend::cpu
